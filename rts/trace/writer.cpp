// writer.cpp - the event trace's writer thread and its JSON.
//
// Note [The trace writer]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Recording must cost the scheduler little (trace/trace.hpp), so all the
// work of the format is done here, off the capabilities: an OS thread
// ("capstan-trace") wakes every kPeriod, takes every buffer's full chunks
// (Note [Trace buffers]), turns their records into trace events and
// appends them to the file.  Spans are written when they end: the writer
// keeps, per track, the run or idle period open on it, and a run record
// closes one span and opens the next.  Labels are records too; each round
// reads the labels of all its chunks before it writes any span, so a span
// recorded on one capability after a label set on another carries it
// (except across rounds' boundaries, where a span recorded before its
// label's chunk filled keeps the old name).  At the end of the run, with
// every other thread gone, trace_stop takes the partly filled chunks as
// well, closes the spans still open, adds the final spark counters and
// the closing brackets: the file is complete and valid whatever way main
// ended (normally, by an exception, or blocked_indefinitely - all return
// through run_main).  A program that calls std::exit or dies of a signal
// leaves an incomplete file.
// Rejected: writing from the capabilities when a chunk fills (a 128 KiB
// write on the scheduler's path); a binary format converted afterwards (a
// second tool to run: Perfetto opens the JSON as it is); one shared buffer
// with atomic appends (an RMW per event, contended across capabilities).
#include "trace/writer.hpp"

#include <errno.h>
#include <fmt/format.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capability/capability.hpp"
#include "primitives/clock.hpp"
#include "runtime/runtime.hpp"
#include "trace/buffer.hpp"
#include "trace/trace.hpp"

namespace capstan::rts {

namespace {

constexpr auto kPeriod = std::chrono::milliseconds(20);
constexpr unsigned kIoTrack = 999;
constexpr unsigned kMiscTrack = 998;
constexpr unsigned kTaskTrack0 = 1000;

struct Track {
  std::uint64_t run_thread = 0;  // open run span: its thread, 0 = none
  std::int64_t run_start = 0;
  bool run_resumed = false;      // opened by a resume, not a switch
  int idle = 0;                  // open idle span: 0 none, 1 idle, 2 sleeping
  std::int64_t idle_start = 0;
  std::int64_t io_work_start = 0;  // IO thread: end of its last wait
};

class Writer {
 public:
  std::FILE* f = nullptr;
  std::string path;
  std::int64_t t0 = 0;
  std::vector<TraceBuffer*> buffers;  // caps, then io, then misc
  std::unordered_map<unsigned, Track> tracks;
  std::unordered_map<std::uint64_t, std::string> labels;
  std::set<unsigned> named_tasks;
  std::string out;
  bool first = true;
  std::uint64_t events = 0;
  bool write_failed = false;

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
      round(false);
      g.lock();
    }
  }

  // round writes out every full chunk (and at the end, every chunk).
  void round(bool final) {
    std::vector<TraceChunk*> chunks(buffers.size());
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      TraceChunk* list = buffers[i]->take_full();
      if (final) {
        TraceChunk* last = buffers[i]->take_current();
        if (last) {
          TraceChunk** tail = &list;
          while (*tail) tail = &(*tail)->next;
          *tail = last;
        }
      }
      chunks[i] = list;
    }
    for (TraceChunk* c : chunks)
      for (; c; c = c->next)
        for (std::uint32_t k = 0; k < c->n; ++k)
          if (c->ev[k].kind == static_cast<std::uint32_t>(TraceKind::label)) {
            auto* s = reinterpret_cast<std::string*>(c->ev[k].c);
            labels[c->ev[k].b] = std::move(*s);
            delete s;
          }
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      for (TraceChunk* c = chunks[i]; c;) {
        for (std::uint32_t k = 0; k < c->n; ++k) convert(buffers[i]->track(), c->ev[k]);
        TraceChunk* next = c->next;
        buffers[i]->give_back(c);
        c = next;
        flush(false);
      }
    }
    flush(true);
  }

  double us(std::int64_t ts) const { return static_cast<double>(ts - t0) / 1000.0; }

  void event(const std::string& e) {
    if (!first) out += ",\n";
    first = false;
    out += e;
    ++events;
  }

  void flush(bool force) {
    if (out.empty() || (!force && out.size() < (1u << 20))) return;
    if (!write_failed && std::fwrite(out.data(), 1, out.size(), f) != out.size()) {
      write_failed = true;
      fmt::print(stderr, "capstan: +RTS -l: writing {} failed: {}; the trace is incomplete\n",
                 path, std::strerror(errno));
    }
    out.clear();
  }

  static std::string json_string(std::string_view s) {
    std::string r = "\"";
    for (char ch : s) {
      auto u = static_cast<unsigned char>(ch);
      if (ch == '"' || ch == '\\') {
        r += '\\';
        r += ch;
      } else if (u < 0x20) {
        r += fmt::format("\\u{:04x}", u);
      } else {
        r += ch;
      }
    }
    return r + "\"";
  }

  std::string thread_title(std::uint64_t id) const {
    auto l = labels.find(id);
    if (l == labels.end() || l->second.empty()) return fmt::format("thread {}", id);
    return fmt::format("thread {} {}", id, l->second);
  }

  void name_track(unsigned tid, const std::string& name) {
    event(fmt::format(R"({{"ph":"M","name":"thread_name","pid":1,"tid":{},"args":{{"name":{}}}}})",
                      tid, json_string(name)));
    event(fmt::format(
        R"({{"ph":"M","name":"thread_sort_index","pid":1,"tid":{},"args":{{"sort_index":{}}}}})", tid,
        tid));
  }

  void span(unsigned tid, const char* cat, const std::string& name, std::int64_t start,
            std::int64_t end, const std::string& args) {
    event(fmt::format(
        R"({{"ph":"X","cat":"{}","name":{},"pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f}{}}})", cat,
        json_string(name), tid, us(start), static_cast<double>(end - start) / 1000.0,
        args.empty() ? "" : ",\"args\":{" + args + "}"));
  }

  void close_run(unsigned tid, Track& t, std::int64_t end, TraceStop stop) {
    if (!t.run_thread) return;
    std::string args = fmt::format(R"("thread":{},"stop":"{}")", t.run_thread, trace_stop_name(stop));
    auto l = labels.find(t.run_thread);
    if (l != labels.end()) args += ",\"label\":" + json_string(l->second);
    if (t.run_resumed) args += ",\"resumed\":true";
    span(tid, "thread", thread_title(t.run_thread), t.run_start, end, args);
    t.run_thread = 0;
  }

  void open_run(Track& t, std::uint64_t thread, std::int64_t ts, bool resumed) {
    t.run_thread = thread;
    t.run_start = ts;
    t.run_resumed = resumed;
  }

  void close_idle(unsigned tid, Track& t, std::int64_t end) {
    if (!t.idle) return;
    span(tid, "idle", t.idle == 1 ? "idle" : "sleeping", t.idle_start, end, "");
    t.idle = 0;
  }

  void task_track(unsigned task) {
    if (named_tasks.insert(task).second) name_track(kTaskTrack0 + task, fmt::format("task {}", task));
  }

  void convert(unsigned tid, const TraceEvent& e) {
    Track& t = tracks[tid];
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
        event(fmt::format(
            R"({{"ph":"f","bp":"e","cat":"wake","name":"wake","id":{},"pid":1,"tid":{},"ts":{:.3f},"args":{{"thread":{}}}}})",
            e.c, tid, us(e.ts), e.b));
        break;
      case TraceKind::wake:
        event(fmt::format(
            R"({{"ph":"s","cat":"wake","name":"wake","id":{},"pid":1,"tid":{},"ts":{:.3f},"args":{{"thread":{}}}}})",
            e.c, tid, us(e.ts), e.b));
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
      case TraceKind::sparks:
        pending_sparks_[tid][0] = e.b;
        pending_sparks_[tid][1] = e.c;
        break;
      case TraceKind::sparks2:
        counters(tid, e.ts, pending_sparks_[tid][0], pending_sparks_[tid][1], e.b, e.c);
        break;
      case TraceKind::safe_call:
      case TraceKind::in_call:
        task_track(e.a);
        span(kTaskTrack0 + e.a, "foreign",
             static_cast<TraceKind>(e.kind) == TraceKind::safe_call ? "safe_call" : "in_call", e.ts,
             static_cast<std::int64_t>(e.c), fmt::format(R"("thread":{})", e.b));
        break;
      case TraceKind::label: break;  // read before the round's spans
      case TraceKind::io_wait:
        if (t.io_work_start) span(tid, "io", "io work", t.io_work_start, e.ts, "");
        span(tid, "io", "io wait", e.ts, static_cast<std::int64_t>(e.c), "");
        t.io_work_start = static_cast<std::int64_t>(e.c);
        break;
      case TraceKind::dropped:
        event(fmt::format(
            R"({{"ph":"i","s":"t","cat":"trace","name":"events dropped","pid":1,"tid":{},"ts":{:.3f},"args":{{"dropped":{}}}}})",
            tid, us(e.ts), e.b));
        break;
    }
  }

  void counters(unsigned tid, std::int64_t ts, std::uint64_t created, std::uint64_t converted,
                std::uint64_t fizzled, std::uint64_t overflowed) {
    event(fmt::format(
        R"({{"ph":"C","name":"sparks cap {}","pid":1,"tid":{},"ts":{:.3f},"args":{{"created":{},"converted":{},"fizzled":{},"overflowed":{}}}}})",
        tid, tid, us(ts), created, converted, fizzled, overflowed));
  }

  std::unordered_map<unsigned, std::array<std::uint64_t, 2>> pending_sparks_;
};

Writer* g_writer = nullptr;  // [start] between trace_start and trace_stop

std::string default_path() {
  return std::string(program_invocation_short_name) + ".trace.json";
}

}  // namespace

void trace_start() {
  if (!rt.opts.trace) return;
  auto* w = new Writer;
  w->path = rt.opts.trace_file.empty() ? default_path() : rt.opts.trace_file;
  w->f = std::fopen(w->path.c_str(), "w");
  if (!w->f) {
    fmt::print(stderr, "capstan: +RTS -l: cannot write the trace to {}: {}; running untraced\n",
               w->path, std::strerror(errno));
    delete w;
    return;
  }
  w->t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(rt.started.time_since_epoch()).count();
  for (Capability* c : rt.caps) {
    c->trace = new TraceBuffer(c->no);
    w->buffers.push_back(c->trace);
  }
  rt.trace_io = new TraceBuffer(kIoTrack);
  rt.trace_misc = new TraceBuffer(kMiscTrack);
  w->buffers.push_back(rt.trace_io);
  w->buffers.push_back(rt.trace_misc);
  w->out = "{\"traceEvents\":[\n";
  w->event(R"({"ph":"M","name":"process_name","pid":1,"args":{"name":"capstan"}})");
  for (Capability* c : rt.caps) w->name_track(c->no, fmt::format("capability {}", c->no));
  w->name_track(kIoTrack, "io manager");
  try {
    w->thread = std::thread([w] { w->loop(); });
  } catch (const std::system_error& e) {
    fmt::print(stderr, "capstan: +RTS -l: cannot start the trace writer thread: {}; running untraced\n",
               e.what());
    std::fclose(w->f);
    for (TraceBuffer* b : w->buffers) delete b;
    for (Capability* c : rt.caps) c->trace = nullptr;
    rt.trace_io = rt.trace_misc = nullptr;
    delete w;
    return;
  }
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
  w->round(true);
  std::int64_t end = now_ns();
  std::uint64_t dropped = 0;
  for (Capability* c : rt.caps) {
    Track& t = w->tracks[c->no];
    w->close_run(c->no, t, end, TraceStop::none);
    w->close_idle(c->no, t, end);
    w->counters(c->no, end, c->sparks.created.load(std::memory_order_relaxed),
                c->sparks_converted.get(), c->sparks.fizzled.load(std::memory_order_relaxed),
                c->sparks.overflowed.load(std::memory_order_relaxed));
  }
  for (TraceBuffer* b : w->buffers) dropped += b->dropped_total;
  w->out += fmt::format(
      "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"program\":{},\"capabilities\":{},"
      "\"clock\":\"CLOCK_MONOTONIC\",\"events\":{},\"dropped\":{}}}}}\n",
      Writer::json_string(program_invocation_short_name), rt.n_caps, w->events, dropped);
  w->flush(true);
  if (std::fclose(w->f) != 0 && !w->write_failed)
    fmt::print(stderr, "capstan: +RTS -l: closing {} failed: {}\n", w->path, std::strerror(errno));
  rt.tracing = false;
  for (Capability* c : rt.caps) c->trace = nullptr;
  for (TraceBuffer* b : w->buffers) delete b;
  rt.trace_io = rt.trace_misc = nullptr;
  g_writer = nullptr;
  delete w;
}

}  // namespace capstan::rts
