// trace.cpp - the event trace's recording hooks (trace/trace.hpp).
#include "trace/trace.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "capability/capability.hpp"
#include "primitives/clock.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"
#include "trace/buffer.hpp"

namespace capstan::rts {

namespace {

constinit thread_local TraceBuffer* tl_thread_buffer = nullptr;  // the IO thread's

// Note [The trace clock].  [start]: set by trace_clock_init before any
// other thread records; the end pair by trace_clock_end after all stopped.
bool g_counter = false;
std::int64_t g_tick0 = 0, g_ns0 = 0, g_tick1 = 0, g_ns1 = 0;

std::int64_t read_counter() noexcept {
#if defined(__x86_64__)
  return static_cast<std::int64_t>(__builtin_ia32_rdtsc());
#elif defined(__aarch64__)
  std::uint64_t v;
  asm volatile("isb; mrs %0, cntvct_el0" : "=r"(v));
  return static_cast<std::int64_t>(v);
#else
  return 0;
#endif
}

bool counter_is_steady() noexcept {
#if defined(__x86_64__)
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  static char line[1 << 14];
  bool constant = false, nonstop = false;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "flags", 5) != 0) continue;
    constant = std::strstr(line, " constant_tsc") != nullptr;
    nonstop = std::strstr(line, " nonstop_tsc") != nullptr;
    break;
  }
  std::fclose(f);
  return constant && nonstop;
#elif defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

void emit(TraceBuffer* b, std::int64_t ts, TraceKind k, std::uint32_t a, std::uint64_t x,
          std::uint64_t y) noexcept {
  b->emit(ts, static_cast<std::uint32_t>(k), a, x, y);
}

// stop_of refines why `from` left into a TraceStop, from what it is
// blocked on (the same fields the thread dump reads, here read by their
// owner).
TraceStop stop_of(const Thread* from, SwitchWhy why) noexcept {
  switch (why) {
    case SwitchWhy::none: return TraceStop::none;
    case SwitchWhy::yield: return TraceStop::yield;
    case SwitchWhy::timeslice: return TraceStop::timeslice;
    case SwitchWhy::preempted: return TraceStop::preempted;
    case SwitchWhy::migrated: return TraceStop::migrated;
    case SwitchWhy::finished: return from->trace_killed ? TraceStop::killed : TraceStop::finished;
    case SwitchWhy::abandoned: return TraceStop::blocked_shutdown;
    case SwitchWhy::blocked: break;
  }
  switch (from->why) {
    case WhyBlocked::on_shutdown: return TraceStop::blocked_shutdown;
    default: break;
  }
  switch (from->io_wait) {
    case IoWait::sleep: return TraceStop::blocked_timer;
    case IoWait::fd_read:
    case IoWait::fd_write:
    case IoWait::close_fd: return TraceStop::blocked_fd;
    case IoWait::none: break;
  }
  switch (from->wait_tag.what) {
    case detail::waiter::mvar: return TraceStop::blocked_mvar;
    case detail::waiter::chan: return TraceStop::blocked_chan;
    case detail::waiter::spark: return TraceStop::blocked_spark;
    default: return TraceStop::blocked_sync;
  }
}

// sparks_changed records cap's spark counters when they moved.
void record_sparks(Capability* cap, TraceBuffer* b, std::int64_t now) noexcept {
  std::uint64_t v[4] = {cap->sparks.created.load(std::memory_order_relaxed),
                        cap->sparks_converted.get(),
                        cap->sparks.fizzled.load(std::memory_order_relaxed),
                        cap->sparks.overflowed.load(std::memory_order_relaxed)};
  if (v[0] == b->sparks_seen[0] && v[1] == b->sparks_seen[1] && v[2] == b->sparks_seen[2] &&
      v[3] == b->sparks_seen[3])
    return;
  for (int i = 0; i < 4; ++i) b->sparks_seen[i] = v[i];
  emit(b, now, TraceKind::sparks, 0, v[0], v[1]);
  emit(b, now, TraceKind::sparks2, 0, v[2], v[3]);
}

// started records what a thread that starts running on cap carries: the
// flow of the wake-up that made it runnable, and the span of the safe
// call it comes back from.
void started(TraceBuffer* b, Thread* t, std::int64_t now) noexcept {
  if (std::uint64_t flow = t->trace_flow) {
    t->trace_flow = 0;
    emit(b, now, TraceKind::flow_end, 0, t->id, flow);
  }
  if (std::int64_t t0 = t->trace_call_t0) {
    t->trace_call_t0 = 0;
    emit(b, t0, TraceKind::safe_call, t->trace_call_task, t->id, static_cast<std::uint64_t>(now));
  }
}

}  // namespace

void trace_clock_init() noexcept {
  g_counter = counter_is_steady();
  g_ns0 = now_ns();
  g_tick0 = g_counter ? read_counter() : g_ns0;
}

std::int64_t trace_now() noexcept { return g_counter ? read_counter() : now_ns(); }

void trace_clock_end() noexcept {
  g_ns1 = now_ns();
  g_tick1 = g_counter ? read_counter() : g_ns1;
}

std::int64_t trace_to_ns(std::int64_t t) noexcept {
  if (!g_counter || g_tick1 == g_tick0) return t;
  long double scale =
      static_cast<long double>(g_ns1 - g_ns0) / static_cast<long double>(g_tick1 - g_tick0);
  return g_ns0 + static_cast<std::int64_t>(static_cast<long double>(t - g_tick0) * scale);
}

const char* trace_stop_name(TraceStop s) noexcept {
  switch (s) {
    case TraceStop::none: return "none";
    case TraceStop::yield: return "yield";
    case TraceStop::timeslice: return "timeslice";
    case TraceStop::preempted: return "preempted";
    case TraceStop::blocked_mvar: return "blocked_mvar";
    case TraceStop::blocked_chan: return "blocked_chan";
    case TraceStop::blocked_timer: return "blocked_timer";
    case TraceStop::blocked_fd: return "blocked_fd";
    case TraceStop::blocked_spark: return "blocked_spark";
    case TraceStop::blocked_sync: return "blocked_sync";
    case TraceStop::blocked_shutdown: return "blocked_shutdown";
    case TraceStop::migrated: return "migrated";
    case TraceStop::safe_call: return "safe_call";
    case TraceStop::finished: return "finished";
    case TraceStop::killed: return "killed";
  }
  return "unknown";
}

void trace_switch(Capability* cap, Thread* from, Thread* to, SwitchWhy why) noexcept {
  if (!cap) return;  // a capless Task's switch: its thread's run ended at its safe call
  TraceBuffer* b = cap->trace;
  std::int64_t now = trace_now();
  emit(b, now, TraceKind::run, from ? static_cast<std::uint32_t>(stop_of(from, why)) : 0,
       from ? from->id : 0, to ? to->id : 0);
  if (to) started(b, to, now);
  record_sparks(cap, b, now);
}

void trace_resume(Capability* cap, Thread* t) noexcept {
  TraceBuffer* b = cap->trace;
  std::int64_t now = trace_now();
  emit(b, now, TraceKind::resume, 0, t->id, 0);
  started(b, t, now);
}

void trace_safe_call_enter(Capability* cap, Task* task, Thread* t) noexcept {
  TraceBuffer* b = cap->trace;
  std::int64_t now = trace_now();
  emit(b, now, TraceKind::run, static_cast<std::uint32_t>(TraceStop::safe_call), t->id, 0);
  t->trace_call_t0 = now;
  t->trace_call_task = task->no;
}

// Note [Wake-up flows]
// ~~~~~~~~~~~~~~~~~~~~
// A wake-up is drawn as an arrow from the waker's track to the woken
// thread's next run.  The waker records the start with a fresh flow id
// (its buffer's track in the top bits, so ids never collide) and leaves
// the id in the woken Thread; whoever next starts it running records the
// end (started()).  The waker owns the right to wake t (Note [Blocking on
// an MVar]) and writes trace_flow before the wake publishes t (a queue
// push with release), and the runner reads it after taking t from a
// queue: the field needs no synchronisation of its own.  Wakers with no
// buffer (the ticker, a foreign OS thread) draw no arrow.
void trace_wake(Thread* t) noexcept {
  Task* task = my_task();
  TraceBuffer* b = task && task->cap ? task->cap->trace : tl_thread_buffer;
  if (!b) return;
  std::uint64_t flow = (static_cast<std::uint64_t>(b->track() + 1) << 40) | ++b->next_flow;
  t->trace_flow = flow;
  emit(b, trace_now(), TraceKind::wake, 0, t->id, flow);
}

void trace_idle(Capability* cap, bool begin) noexcept {
  emit(cap->trace, trace_now(), begin ? TraceKind::idle_begin : TraceKind::idle_end, 0, 0, 0);
}

void trace_sleep(Capability* cap, bool begin) noexcept {
  emit(cap->trace, trace_now(), begin ? TraceKind::sleep_begin : TraceKind::sleep_end, 0, 0, 0);
}

void trace_label(Capability* cap, std::uint64_t thread, std::string_view label) noexcept {
  std::string* copy = nullptr;
  try {
    copy = new std::string(label);
  } catch (...) {
    return;  // out of memory: the trace keeps the old label
  }
  emit(cap->trace, trace_now(), TraceKind::label, 0, thread, reinterpret_cast<std::uintptr_t>(copy));
}

void trace_in_call(Task* task, std::uint64_t thread, std::int64_t start) noexcept {
  std::lock_guard<std::mutex> g(rt.trace_misc_mu);
  emit(rt.trace_misc, start, TraceKind::in_call, task->no, thread,
       static_cast<std::uint64_t>(trace_now()));
}

void trace_bind_io_thread() noexcept { tl_thread_buffer = rt.trace_io; }

void trace_io_wait(std::int64_t start, std::int64_t waited_ns) noexcept {
  emit(rt.trace_io, start, TraceKind::io_wait, 0, 0, static_cast<std::uint64_t>(waited_ns));
}

}  // namespace capstan::rts
