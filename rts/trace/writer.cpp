// writer.cpp - the event trace's writer thread and its JSON.
//
// Note [The trace writer]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Recording must cost the scheduler little (trace/trace.hpp), and a busy
// program records tens of millions of events a second: far more than JSON
// can be formatted at.  So the trace is written in two steps, as GHC's
// eventlog is written in binary and read by ThreadScope afterwards:
//  1. during the run, an OS thread ("capstan-trace") wakes every kPeriod,
//     takes every buffer's full chunks (Note [Trace buffers]) and appends
//     them, as they are, to an unlinked temporary file (the spool): a
//     128 KiB write per chunk, so the writer keeps up with any rate the
//     capabilities can record at, and the buffers stay small;
//  2. when the run ends (trace_stop, every other thread gone), it adds
//     each buffer's partly filled chunk, then reads the spool twice: once
//     for the labels, once to turn every record into trace events, written
//     to the trace file.  Spans are written when they end: per track, the
//     converter keeps the run or idle period open on it.  Reading labels
//     first means every span of a labelled thread carries its label, even
//     one recorded on another capability before the label's record.
// The file is complete and valid whatever way main ended (normally, by an
// exception, or blocked_indefinitely: all return through run_main); a
// program that calls std::exit or dies of a signal leaves no trace file
// content beyond its first line.  The conversion costs time at exit
// (about a second per five million events here), not during the run.
// Rejected: formatting JSON during the run (the writer fell behind a
// ping-pong by a factor of four and events were dropped); a binary format
// for users to convert (a second tool to run: Perfetto opens the JSON as
// it is); one shared buffer with atomic appends (an RMW per event,
// contended across capabilities).
#include "trace/writer.hpp"

#include <errno.h>
#include <fmt/format.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capability/capability.hpp"
#include "primitives/clock.hpp"
#include "primitives/say.hpp"
#include "runtime/runtime.hpp"
#include "trace/buffer.hpp"
#include "trace/trace.hpp"

namespace capstan::rts {

namespace {

constexpr auto kPeriod = std::chrono::milliseconds(20);
constexpr unsigned kIoTrack = 999;
constexpr unsigned kMiscTrack = 998;
constexpr unsigned kTaskTrack0 = 1000;

// A chunk in the spool: which buffer's, how many events, then the events.
struct SpoolHeader {
  std::uint32_t buffer;
  std::uint32_t n;
};

struct Track {
  std::uint64_t run_thread = 0;  // open run span: its thread, 0 = none
  std::int64_t run_start = 0;
  bool run_resumed = false;      // opened by a resume, not a switch
  int idle = 0;                  // open idle span: 0 none, 1 idle, 2 sleeping
  std::int64_t idle_start = 0;
  std::int64_t io_work_start = 0;  // IO thread: end of its last wait
  std::array<std::uint64_t, 2> sparks{};  // created, converted: awaiting sparks2
};

// utf8_length: the length of the well-formed UTF-8 sequence at the start
// of s (RFC 3629: no overlong forms, no surrogates, nothing past
// U+10FFFF), or 0 if there is none.
std::size_t utf8_length(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(0);
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (b(i) < 0x80 || b(i) > 0xbf) return 0;
  return n;
}

// json_string quotes s for JSON.  A label is any bytes the program gave
// label_thread, and JSON is UTF-8: a byte that begins no well-formed
// UTF-8 sequence becomes U+FFFD, so the file stays valid JSON that every
// reader loads.
std::string json_string(std::string_view s) {
  std::string r = "\"";
  for (std::size_t i = 0; i < s.size();) {
    char ch = s[i];
    auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      r += '\\';
      r += ch;
    } else if (u < 0x20) {
      r += fmt::format("\\u{:04x}", u);
    } else if (u >= 0x80) {
      std::size_t n = utf8_length(s.substr(i));
      if (n == 0) {
        r += "\\ufffd";
        ++i;
      } else {
        r.append(s.substr(i, n));
        i += n;
      }
      continue;
    } else {
      r += ch;
    }
    ++i;
  }
  return r + "\"";
}

// Json turns the spool's records into trace events (step 2).
class Json {
 public:
  std::FILE* f = nullptr;
  std::string path;
  std::int64_t t0 = 0;
  std::uint64_t events = 0;
  bool failed = false;
  std::unordered_map<std::uint64_t, std::string> labels;  // thread -> escaped label, quotes included

  void begin() {
    out_ = "{\"traceEvents\":[\n";
    raw(R"({"ph":"M","name":"process_name","pid":1,"args":{"name":"capstan"}})");
    for (Capability* c : rt.caps) name_track(c->no, fmt::format("capability {}", c->no));
    name_track(kIoTrack, "io manager");
  }

  // convert turns one record into events; times become now_ns() values
  // here (Note [The trace clock]).
  void convert(unsigned tid, const TraceEvent& rec) {
    TraceEvent e = rec;
    e.ts = trace_to_ns(rec.ts);
    Track& t = tracks_[tid];
    switch (static_cast<TraceKind>(e.kind)) {
      case TraceKind::run:
        if (e.b && t.run_thread == e.b) close_run(tid, t, e.ts, static_cast<TraceStop>(e.a));
        if (e.c) {
          close_idle(tid, t, e.ts);
          close_run(tid, t, e.ts, TraceStop::none);  // (a run we never saw end)
          open_run(t, e.c, e.ts, false);
        }
        break;
      case TraceKind::resume:
        close_idle(tid, t, e.ts);
        close_run(tid, t, e.ts, TraceStop::none);
        open_run(t, e.b, e.ts, true);
        break;
      case TraceKind::flow_end:
        sep();
        fmt::format_to(std::back_inserter(out_),
                       R"({{"ph":"f","bp":"e","cat":"wake","name":"wake","id":{},"pid":1,"tid":{},"ts":{:.3f},"args":{{"thread":{}}}}})",
                       e.c, tid, us(e.ts), e.b);
        break;
      case TraceKind::wake:
        sep();
        fmt::format_to(std::back_inserter(out_),
                       R"({{"ph":"s","cat":"wake","name":"wake","id":{},"pid":1,"tid":{},"ts":{:.3f},"args":{{"thread":{}}}}})",
                       e.c, tid, us(e.ts), e.b);
        break;
      case TraceKind::idle_begin:
        close_run(tid, t, e.ts, TraceStop::none);
        close_idle(tid, t, e.ts);
        t.idle = 1;
        t.idle_start = e.ts;
        break;
      case TraceKind::idle_end: close_idle(tid, t, e.ts); break;
      case TraceKind::sleep_begin:
        close_idle(tid, t, e.ts);
        t.idle = 2;
        t.idle_start = e.ts;
        break;
      case TraceKind::sleep_end:
        close_idle(tid, t, e.ts);
        t.idle = 1;
        t.idle_start = e.ts;
        break;
      case TraceKind::sparks: t.sparks = {e.b, e.c}; break;
      case TraceKind::sparks2: counters(tid, e.ts, t.sparks[0], t.sparks[1], e.b, e.c); break;
      case TraceKind::safe_call:
      case TraceKind::in_call:
        task_track(e.a);
        span_begin(kTaskTrack0 + e.a, "foreign", e.ts, trace_to_ns(static_cast<std::int64_t>(e.c)));
        fmt::format_to(std::back_inserter(out_), R"("name":"{}","args":{{"thread":{}}}}})",
                       static_cast<TraceKind>(e.kind) == TraceKind::safe_call ? "safe_call" : "in_call",
                       e.b);
        break;
      case TraceKind::label: break;  // read in the first pass
      case TraceKind::io_wait:
        if (t.io_work_start) {
          span_begin(tid, "io", t.io_work_start, e.ts);
          out_ += R"("name":"io work"})";
        }
        span_begin(tid, "io", e.ts, e.ts + static_cast<std::int64_t>(e.c));
        out_ += R"("name":"io wait"})";
        t.io_work_start = e.ts + static_cast<std::int64_t>(e.c);
        break;
      case TraceKind::dropped:
        sep();
        fmt::format_to(std::back_inserter(out_),
                       R"({{"ph":"i","s":"t","cat":"trace","name":"events dropped","pid":1,"tid":{},"ts":{:.3f},"args":{{"dropped":{}}}}})",
                       tid, us(e.ts), e.b);
        break;
    }
    if (out_.size() >= (1u << 20)) flush();
  }

  // finish closes what is still open at `end` and writes the final spark
  // counters and the end of the file.
  void finish(std::int64_t end, std::uint64_t dropped) {
    for (Capability* c : rt.caps) {
      Track& t = tracks_[c->no];
      close_run(c->no, t, end, TraceStop::none);
      close_idle(c->no, t, end);
      counters(c->no, end, c->sparks.created.load(std::memory_order_relaxed),
               c->sparks_converted.get(), c->sparks.fizzled.load(std::memory_order_relaxed),
               c->sparks.overflowed.load(std::memory_order_relaxed));
    }
    fmt::format_to(std::back_inserter(out_),
                   "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"program\":{},\"capabilities\":{},"
                   "\"clock\":\"CLOCK_MONOTONIC\",\"events\":{},\"dropped\":{}}}}}\n",
                   json_string(program_invocation_short_name), rt.n_caps, events, dropped);
    flush();
  }

  void flush() {
    if (!failed && std::fwrite(out_.data(), 1, out_.size(), f) != out_.size()) {
      failed = true;
      say("capstan: +RTS -l: writing {} failed: {}; the trace is incomplete\n",
                 path, std::strerror(errno));
    }
    out_.clear();
  }

 private:
  double us(std::int64_t ts) const { return static_cast<double>(ts - t0) / 1000.0; }

  void sep() {
    if (!first_) out_ += ",\n";
    first_ = false;
    ++events;
  }
  void raw(std::string_view e) {
    sep();
    out_ += e;
  }

  void name_track(unsigned tid, const std::string& name) {
    sep();
    fmt::format_to(std::back_inserter(out_),
                   R"({{"ph":"M","name":"thread_name","pid":1,"tid":{},"args":{{"name":{}}}}})", tid,
                   json_string(name));
    sep();
    fmt::format_to(std::back_inserter(out_),
                   R"({{"ph":"M","name":"thread_sort_index","pid":1,"tid":{},"args":{{"sort_index":{}}}}})",
                   tid, tid);
  }

  // span_begin writes a complete event up to its name: the caller adds
  // `"name":...}` (and args).
  void span_begin(unsigned tid, const char* cat, std::int64_t start, std::int64_t end) {
    sep();
    fmt::format_to(std::back_inserter(out_), R"({{"ph":"X","cat":"{}","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f},)",
                   cat, tid, us(start), static_cast<double>(end - start) / 1000.0);
  }

  void close_run(unsigned tid, Track& t, std::int64_t end, TraceStop stop) {
    if (!t.run_thread) return;
    span_begin(tid, "thread", t.run_start, end);
    auto l = labels.find(t.run_thread);
    if (l == labels.end()) {
      fmt::format_to(std::back_inserter(out_), R"("name":"thread {}","args":{{"thread":{},"stop":"{}")",
                     t.run_thread, t.run_thread, trace_stop_name(stop));
    } else {
      // The label is escaped and quoted: splice it into the name unquoted.
      std::string_view bare(l->second.data() + 1, l->second.size() - 2);
      fmt::format_to(std::back_inserter(out_),
                     R"("name":"thread {} {}","args":{{"thread":{},"stop":"{}","label":{})",
                     t.run_thread, bare, t.run_thread, trace_stop_name(stop), l->second);
    }
    out_ += t.run_resumed ? ",\"resumed\":true}}" : "}}";
    t.run_thread = 0;
  }

  static void open_run(Track& t, std::uint64_t thread, std::int64_t ts, bool resumed) {
    t.run_thread = thread;
    t.run_start = ts;
    t.run_resumed = resumed;
  }

  void close_idle(unsigned tid, Track& t, std::int64_t end) {
    if (!t.idle) return;
    span_begin(tid, "idle", t.idle_start, end);
    out_ += t.idle == 1 ? R"("name":"idle"})" : R"("name":"sleeping"})";
    t.idle = 0;
  }

  void task_track(unsigned task) {
    if (named_tasks_.insert(task).second) name_track(kTaskTrack0 + task, fmt::format("task {}", task));
  }

  void counters(unsigned tid, std::int64_t ts, std::uint64_t created, std::uint64_t converted,
                std::uint64_t fizzled, std::uint64_t overflowed) {
    sep();
    fmt::format_to(std::back_inserter(out_),
                   R"({{"ph":"C","name":"sparks cap {}","pid":1,"tid":{},"ts":{:.3f},"args":{{"created":{},"converted":{},"fizzled":{},"overflowed":{}}}}})",
                   tid, tid, us(ts), created, converted, fizzled, overflowed);
  }

  std::string out_;
  bool first_ = true;
  std::unordered_map<unsigned, Track> tracks_;
  std::set<unsigned> named_tasks_;
};

// Writer: the spool and its thread (step 1), then the conversion (step 2).
class Writer {
 public:
  Json json;
  std::FILE* spool = nullptr;
  bool spool_failed = false;
  std::vector<TraceBuffer*> buffers;  // caps, then io, then misc

  std::mutex mu;
  std::condition_variable cv;
  bool quit = false;  // [lock:mu]
  std::thread thread;

  void loop() {
    pthread_setname_np(pthread_self(), "capstan-trace");
    std::unique_lock<std::mutex> g(mu);
    while (!quit) {
      cv.wait_for(g, kPeriod);
      if (quit) break;
      g.unlock();
      spool_round(false);
      g.lock();
    }
  }

  // spool_round appends every full chunk (and at the end, every chunk) to
  // the spool and gives the chunks back.
  void spool_round(bool final) {
    for (std::uint32_t i = 0; i < buffers.size(); ++i) {
      TraceChunk* c = buffers[i]->take_full();
      if (final) {
        if (TraceChunk* last = buffers[i]->take_current()) {
          TraceChunk** tail = &c;
          while (*tail) tail = &(*tail)->next;
          *tail = last;
        }
      }
      while (c) {
        SpoolHeader h{i, c->n};
        if (!spool_failed && (std::fwrite(&h, sizeof h, 1, spool) != 1 ||
                              std::fwrite(c->ev, sizeof(TraceEvent), c->n, spool) != c->n)) {
          spool_failed = true;
          say("capstan: +RTS -l: writing the trace's temporary file failed: {}; "
                             "the trace will be incomplete\n", std::strerror(errno));
        }
        TraceChunk* next = c->next;
        buffers[i]->give_back(c);
        c = next;
      }
    }
  }

  // read_spool calls fn(buffer, event) for every spooled event, in order.
  template <class Fn>
  void read_spool(Fn fn) {
    std::rewind(spool);
    std::vector<TraceEvent> ev(TraceChunk::kEvents);
    SpoolHeader h;
    while (std::fread(&h, sizeof h, 1, spool) == 1) {
      if (h.n > TraceChunk::kEvents || h.buffer >= buffers.size() ||
          std::fread(ev.data(), sizeof(TraceEvent), h.n, spool) != h.n)
        break;  // a short spool (its write failed): convert what is there
      for (std::uint32_t k = 0; k < h.n; ++k) fn(h.buffer, ev[k]);
    }
  }
};

Writer* g_writer = nullptr;  // [start] between trace_start and trace_stop

std::string default_path() { return std::string(program_invocation_short_name) + ".trace.json"; }

void free_buffers(Writer* w) {
  for (TraceBuffer* b : w->buffers) delete b;
  for (Capability* c : rt.caps) c->trace = nullptr;
  rt.trace_io = rt.trace_misc = nullptr;
}

}  // namespace

void trace_start() {
  if (!rt.opts.trace) return;
  auto* w = new Writer;
  w->json.path = rt.opts.trace_file.empty() ? default_path() : rt.opts.trace_file;
  w->json.f = std::fopen(w->json.path.c_str(), "w");
  if (!w->json.f) {
    say("capstan: +RTS -l: cannot write the trace to {}: {}; running untraced\n",
               w->json.path, std::strerror(errno));
    delete w;
    return;
  }
  w->spool = std::tmpfile();
  if (!w->spool) {
    say("capstan: +RTS -l: cannot make a temporary file for the trace: {}; running "
                       "untraced\n", std::strerror(errno));
    std::fclose(w->json.f);
    delete w;
    return;
  }
  w->json.t0 =
      std::chrono::duration_cast<std::chrono::nanoseconds>(rt.started.time_since_epoch()).count();
  for (Capability* c : rt.caps) {
    c->trace = new TraceBuffer(c->no);
    w->buffers.push_back(c->trace);
  }
  rt.trace_io = new TraceBuffer(kIoTrack);
  rt.trace_misc = new TraceBuffer(kMiscTrack);
  w->buffers.push_back(rt.trace_io);
  w->buffers.push_back(rt.trace_misc);
  try {
    w->thread = std::thread([w] { w->loop(); });
  } catch (const std::system_error& e) {
    say("capstan: +RTS -l: cannot start the trace writer thread: {}; running untraced\n",
               e.what());
    std::fclose(w->json.f);
    std::fclose(w->spool);
    free_buffers(w);
    delete w;
    return;
  }
  trace_clock_init();
  g_writer = w;
  rt.tracing = true;
}

void trace_stop() noexcept {
  Writer* w = g_writer;
  if (!w) return;
  {
    std::lock_guard<std::mutex> g(w->mu);
    w->quit = true;
  }
  w->cv.notify_one();
  w->thread.join();
  w->spool_round(true);
  std::fflush(w->spool);
  trace_clock_end();
  std::int64_t end = now_ns();
  std::uint64_t dropped = 0;
  for (TraceBuffer* b : w->buffers) dropped += b->dropped_total;
  try {
    const auto& buffers = w->buffers;
    // Pass 1: the labels (their strings are freed here, whatever happens next).
    w->read_spool([&](std::uint32_t, const TraceEvent& e) {
      if (e.kind != static_cast<std::uint32_t>(TraceKind::label)) return;
      auto* s = reinterpret_cast<std::string*>(e.c);
      w->json.labels[e.b] = json_string(*s);
      delete s;
    });
    // Pass 2: the events.
    w->json.begin();
    w->read_spool([&](std::uint32_t b, const TraceEvent& e) { w->json.convert(buffers[b]->track(), e); });
    w->json.finish(end, dropped);
  } catch (const std::exception& e) {
    say("capstan: +RTS -l: writing {} failed: {}\n", w->json.path, e.what());
  }
  if (std::fclose(w->json.f) != 0 && !w->json.failed)
    say("capstan: +RTS -l: closing {} failed: {}\n", w->json.path,
               std::strerror(errno));
  std::fclose(w->spool);
  rt.tracing = false;
  free_buffers(w);
  g_writer = nullptr;
  delete w;
}

}  // namespace capstan::rts
