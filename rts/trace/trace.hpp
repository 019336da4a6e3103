// trace.hpp - the event trace's recording side (+RTS -l): what the
// scheduler, the idle loop, safe calls, wake-ups, labels and the IO
// manager record, and in which buffer.  The writer (trace/writer.cpp)
// turns the records into Chrome trace-event JSON; docs/trace.md describes
// the file.
//
// Every hook is called behind `if (rt.tracing) [[unlikely]]`, so tracing
// off costs a load of a read-only flag and a branch predicted not taken,
// at the few places that record; the hooks themselves are out of line, so
// the switch path keeps its inlined shape (schedule/switch.hpp).
//
// Who records where (Note [Trace buffers] in trace/buffer.hpp):
//   * a capability's holder, into the capability's buffer: its thread runs
//     (run, resume), idle and sleeping time, wake-ups it makes, labels,
//     spark counters, and safe calls (recorded when the caller has a
//     capability again: a span from the call until then);
//   * the IO manager's thread, into its own buffer: its waits in the
//     kernel and the wake-ups it makes;
//   * anyone else (an in-call's foreign Task after it gave its capability
//     up), into the shared buffer under its lock: rare events only.
#pragma once

#include <cstdint>
#include <string_view>

namespace capstan::rts {

struct Capability;
struct Task;
struct Thread;
class TraceBuffer;

// Record kinds (TraceEvent::kind) and the meaning of a, b, c.
enum class TraceKind : std::uint32_t {
  run = 1,      // a switch on this capability: a = TraceStop of b; b = thread left (0: none);
                // c = thread started (0: none)
  resume,       // b resumes running here without a switch (back from a safe call)
  flow_end,     // b = thread whose run starts now was woken by flow c
  wake,         // this track woke thread b: flow c
  idle_begin,   // the capability found nothing to run
  idle_end,
  sleep_begin,  // its Task parks in the OS (inside an idle period)
  sleep_end,
  sparks,       // b = created, c = converted (cumulative, this capability)
  sparks2,      // b = fizzled, c = overflowed
  safe_call,    // ts = start; a = task; b = thread; c = end
  in_call,      // ts = start; a = task; b = thread; c = end
  label,        // b = thread; c = a heap std::string*, which the writer frees
  io_wait,      // ts = start; c = nanoseconds it waited in the kernel (the IO manager)
  dropped,      // b = events lost here because the writer lagged
};

// Why a thread stopped running (TraceEvent::a of a run record).
enum class TraceStop : std::uint32_t {
  none,
  yield,
  timeslice,
  preempted,     // a thread back from a safe call went first
  blocked_mvar,
  blocked_chan,
  blocked_timer,
  blocked_fd,
  blocked_spark,
  blocked_sync,  // mutex, condition_variable, semaphore, latch, barrier, wait_group, future, throw_to
  blocked_shutdown,
  migrated,      // moved itself to another capability (a spark's, or off a bound Task)
  safe_call,
  finished,
  killed,        // finished by an exception thrown to it (thread_killed)
};
const char* trace_stop_name(TraceStop s) noexcept;

// What a switch_to caller knows about why the running thread leaves; the
// blocked reasons are refined from the Thread (trace_switch).
enum class SwitchWhy : std::uint8_t { none, yield, timeslice, preempted, blocked, migrated, finished, abandoned };

// Note [The trace clock]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Every record's time comes from trace_now(): the CPU's cycle counter
// where it runs at a constant rate in every state (x86-64 with
// constant_tsc and nonstop_tsc in /proc/cpuinfo; AArch64's virtual counter
// always does), else now_ns().  A counter read costs 10 ns here against 25
// for clock_gettime, and a ping-pong records two times per hop.  The
// writer maps counter values to nanoseconds with two (counter, now_ns())
// pairs taken when tracing starts and when it stops (trace_clock_init,
// trace_to_ns), so the file's times are on the monotonic clock.
void trace_clock_init() noexcept;
std::int64_t trace_now() noexcept;
// trace_to_ns converts a trace_now() value to now_ns()'s clock, from the
// two pairs (call trace_clock_end first, when recording has stopped).
void trace_clock_end() noexcept;
std::int64_t trace_to_ns(std::int64_t t) noexcept;

// trace_switch records a switch on cap from `from` to `to` (either null).
void trace_switch(Capability* cap, Thread* from, Thread* to, SwitchWhy why) noexcept;
// trace_resume records that t runs on cap again without a switch.
void trace_resume(Capability* cap, Thread* t) noexcept;
// trace_safe_call_enter records that t, running on cap, enters a safe call
// on `task` (its run ends; the call's span is recorded when it resumes).
void trace_safe_call_enter(Capability* cap, Task* task, Thread* t) noexcept;
// trace_wake records that the caller woke t (a flow to t's next run).
void trace_wake(Thread* t) noexcept;
// trace_idle / trace_sleep record the start (true) or end of an idle
// period of cap, and of its Task's sleep inside one.
void trace_idle(Capability* cap, bool begin) noexcept;
void trace_sleep(Capability* cap, bool begin) noexcept;
// trace_label records t's new label.
void trace_label(Capability* cap, std::uint64_t thread, std::string_view label) noexcept;
// trace_in_call records an in-call's span [start, now] (trace_now()) on `task`.
void trace_in_call(Task* task, std::uint64_t thread, std::int64_t start) noexcept;
// trace_bind_io_thread makes the calling OS thread (the IO manager's)
// record its wake-ups into rt.trace_io.
void trace_bind_io_thread() noexcept;
// trace_io_wait records an IO manager wait of `waited_ns` that began at
// `start` (trace_now()); IO thread only.
void trace_io_wait(std::int64_t start, std::int64_t waited_ns) noexcept;

}  // namespace capstan::rts
