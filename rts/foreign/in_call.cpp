// in_call.cpp - calls into the runtime from OS threads that run no green
// thread (GHC's rts_lock / rts_evalIO / rts_unlock, an "InCall").
//
// Note [In-calls]
// ~~~~~~~~~~~~~~~
// call_in makes the calling OS thread a Task (kind foreign, kept in a
// thread_local for later calls in the same run) and runs the function as a
// green thread bound to it.  To get a capability it first claims a free one
// (no other OS thread involved: a capability whose Task is blocked in a
// safe call, or that a previous in-call left free); otherwise it queues the
// thread on a capability and waits until that capability's holder picks it
// and gives the capability over (Note [Bound threads]).  It then runs the
// scheduler loop on its own stack - running other threads too if its own
// blocks - until its thread finishes, and gives the capability up
// (release_capability: to a waiting bound Task, a spare if work remains,
// else free).
// Nested in-calls: C code running inside safe_call may call back.  The Task
// is then already this OS thread's Task, holding no capability; its
// scheduler context for the nested loop is the stack of the thread in the
// safe call, so the outer context (sched_sp and sanitizer state) is saved
// and restored around it, as GHC keeps a stack of InCalls per Task.
// Start and stop: process.accepting_incalls is set once run() has started
// every capability and cleared first thing at shutdown.  A caller
// increments process.incalls (seq_cst) before reading the flag (seq_cst);
// shutdown clears the flag before it reads the count, so it either refuses
// the call or waits for it (Dekker again); run() frees nothing until the
// count is 0.  Every path out of call_in_raw after the increment - a
// refusal, a Task or thread that cannot be made, the call's end - undoes it
// exactly once (InCallCount), or run() would wait for ever.
#include <sched.h>

#include <climits>
#include <cstdio>
#include <cstring>

#include "capstan/errors.hpp"
#include "capstan/foreign.hpp"
#include "capstan/spark.hpp"
#include "mvar/event.hpp"
#include "primitives/parker.hpp"
#include "primitives/sanitizer.hpp"
#include "primitives/spin.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"
#include "task/handover.hpp"
#include "thread/dump.hpp"
#include "trace/trace.hpp"
#include "primitives/clock.hpp"

namespace capstan::detail {

using namespace capstan::rts;

namespace {

struct InCallClosure {
  void (*fn)(void*);
  void* ctx;
};
bool incall_invoke(void* p) {
  auto* c = static_cast<InCallClosure*>(p);
  c->fn(c->ctx);
  return true;
}
void incall_destroy(void*) noexcept {}
constexpr closure_ops kInCallOps{&incall_invoke, &incall_destroy};

// This OS thread's Task for in-calls, valid in run number `epoch` only.
struct ForeignSlot {
  Task* task = nullptr;
  std::uint64_t epoch = 0;
};
thread_local ForeignSlot tl_foreign;

// InCallCount counts one in-call in process.incalls for its lifetime.
//
// Note [Refused in-calls are not counted]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// run() returns only once the count is 0 (Note [In-calls]), and a refused
// call used to be counted too, for the instant between its increment and
// its refusal.  A C library whose callback threads retry a refused call_in
// (catch the usage_error, try again) kept the count from ever being read as
// 0: with 4 such threads run() took 1-1.5 s to return, with 8 up to 20 s,
// with 16 it did not return.  So a caller first reads the flag, and one
// that finds calls refused is refused uncounted; only one that found them
// accepted counts itself and reads the flag again (the Dekker step above).
// Once shutdown has cleared the flag, only callers that read it set just
// before can still count themselves in: the count drains.
class InCallCount {
 public:
  InCallCount() {
    if (!process.accepting_incalls.load(std::memory_order_seq_cst)) return;  // see the Note
    process.incalls.fetch_add(1, std::memory_order_seq_cst);
    counted_ = true;
  }
  InCallCount(const InCallCount&) = delete;
  InCallCount& operator=(const InCallCount&) = delete;
  ~InCallCount() {
    if (!counted_) return;
    // Still counted, so the Runtime (if accepted) is alive.
    if (accepted_ && rt.shutting_down.load(std::memory_order_acquire) && rt.shutdown_events)
      rt.shutdown_events->notify();
    // Last touch of the runtime: run() may free everything once this is 0.
    // run() waits on the count only after the schedulers stopped, so the
    // futex wake (a system call) is needed only then: seq_cst on both sides
    // - run() sets awaiting_incalls, then reads the count; we decrement,
    // then read awaiting_incalls - so either run() sees our decrement or we
    // see the flag.
    if (process.incalls.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        process.awaiting_incalls.load(std::memory_order_seq_cst))
      futex_wake(&process.incalls, INT_MAX);
  }
  // accept: the runtime takes the call (false: refused).
  bool accept() {
    accepted_ = counted_ && process.accepting_incalls.load(std::memory_order_seq_cst);
    return accepted_;
  }

 private:
  bool counted_ = false;
  bool accepted_ = false;
};

Capability* claim_any(Capability* hint) {
  if (try_grab_capability(hint)) return hint;
  for (Capability* c : rt.caps)
    if (c != hint && try_grab_capability(c)) return c;
  return nullptr;
}

// Note [Spinning for a free capability]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An in-call that finds every capability held queues its thread and waits
// to be handed a capability (Note [Bound threads]).  When several OS
// threads call in at a high rate, that alone makes a convoy: each in-call
// that ends hands the capability to the next queued Task, which is asleep
// or not on a CPU (callback001 at -N1: four threads, two CPUs, one
// capability), so every call paid an OS wake-up and a pass through the
// kernel's scheduler - 11-13 us per in-call, where the calls themselves
// take about 0.1 us.  A futex-based mutex avoids the same convoy by
// letting a running thread take the lock when it is free instead of
// handing it to a sleeper.  So an in-call that finds no free capability,
// while some capability is held by an in-call's Task (Capability::
// held_by_incall: it will likely let the capability go within
// microseconds), keeps trying to claim one for about kClaimSpinNs -
// pausing, then yielding its CPU between tries (SpinWait: with four
// threads on two CPUs the holder may be waiting for ours), reading the
// clock every 16 turns and after every yield - and queues after that.  Only with a second CPU (on one, spinning would
// only delay the holder).  An in-call behind capabilities that green
// threads hold (main, workers, spares) queues at once, as before, and is
// let in at the holder's next scheduling point; but an in-call's Task also
// runs other green threads while its own thread is blocked (Note
// [In-calls]), and an in-call behind one of those spins its 20 us out
// before it queues.  Queued threads keep their priority: a releasing
// holder hands the capability to the front bound thread, and lets it go
// free only when none waits.  The claim is the same CAS as ever
// (try_grab_capability), so the hand-over protocol does not change: a
// claim retried later is an in-call that arrived later, which
// models/capability_handover.pml already explores.
constexpr std::int64_t kClaimSpinNs = 20'000;

// held_by_an_in_call: some capability is held by an in-call's Task (a
// hint: relaxed loads of flags their holders write).
bool held_by_an_in_call() {
  for (Capability* c : rt.caps)
    if (c->held_by_incall.load(std::memory_order_relaxed) &&
        c->hold.load(std::memory_order_relaxed) == Hold::held)
      return true;
  return false;
}

Capability* claim_spinning(Capability* hint) {
  if (rt.n_cpus < 2 || !held_by_an_in_call()) return nullptr;
  std::int64_t deadline = now_ns() + kClaimSpinNs;
  SpinWait spin;
  for (unsigned i = 1;; ++i) {
    spin.turn();  // pauses, then (after kSpinTurns) a sched_yield per turn
    if (Capability* c = claim_any(hint)) return c;
    if (((i & 15) == 0 || i > kSpinTurns) &&
        (now_ns() > deadline || !process.accepting_incalls.load(std::memory_order_relaxed) ||
         !held_by_an_in_call()))
      return nullptr;
  }
}

}  // namespace

void call_in_raw(void (*fn)(void*), void* ctx) {
  Task* task = my_task();
  Thread* outer = nullptr;  // the thread whose safe call we are nested in
  if (task) {
    outer = task->in_safe_call.load(std::memory_order_relaxed);
    if (!outer)
      throw usage_error(
          "capstan::call_in: called from a green thread; call the function directly "
          "(call_in is for OS threads outside the runtime, such as a C library's callback "
          "thread, and for C code running inside capstan::safe_call)");
  }
  InCallCount count;
  if (!count.accept()) {
    bool running = process.running.load();
    throw usage_error(running ? "capstan::call_in: the runtime is starting or shutting down; "
                                "calls into it are accepted only while capstan::run runs"
                              : "capstan::call_in: no runtime is running; call it while "
                                "capstan::run is active");
  }
  if (!task) {
    if (tl_foreign.epoch != process.epoch || !tl_foreign.task) {
      tl_foreign.task = new_task(TaskKind::foreign);  // may throw: count undone
      tl_foreign.epoch = process.epoch;
      bind_task_to_this_os_thread(tl_foreign.task);
    }
    task = tl_foreign.task;
    set_my_task(task);
  }
  // Save the outer scheduler context (nested in-calls); see the Note.
  void* saved_sp = task->sched_sp;
  void* saved_fiber = task->tsan_fiber;
  const void* saved_lo = task->native_stack_lo;
  std::size_t saved_size = task->native_stack_size;
  Thread* saved_bound = task->bound_thread;
  if (outer) {
    task->native_stack_lo = outer->stack_lo;
    task->native_stack_size = rt.arena.size();
  }
  init_task_sanitizer_state(task);

  Capability* hint =
      task->last_cap ? task->last_cap
                     : rt.caps[rt.next_bound_cap.fetch_add(1, std::memory_order_relaxed) % rt.n_caps];
  Capability* got = claim_any(hint);
  if (!got) got = claim_spinning(hint);  // Note [Spinning for a free capability]
  Capability* home = got ? got : hint;
  InCallClosure closure{fn, ctx};
  Thread* t;
  try {
    t = create_incall_thread(task, home, &kInCallOps, &closure, sizeof closure, got != nullptr);
  } catch (...) {
    // Nothing was queued: put the Task back as we found it, give up the
    // capability we may have grabbed, and let the count go.
    task->native_stack_lo = saved_lo;
    task->native_stack_size = saved_size;
    task->tsan_fiber = saved_fiber;
    if (got) {
      got->hold.exchange(Hold::free, std::memory_order_seq_cst);  // an RMW: Note [Sleeping capabilities]
      if (got->inbox.nonempty_seq_cst() && try_grab_capability(got))
        give_capability_to_spare(got);
    }
    if (!outer) set_my_task(nullptr);
    throw;
  }
  task->bound_thread = t;
  task->bound_done = false;
  std::int64_t started_ns = rt.tracing ? trace_now() : 0;
  std::uint64_t thread_no = t->id;  // t is recycled once it finishes
  if (got) {
    take_capability(task, got);
    got->run_queue.push_front(t);
  } else {
    task->last_cap = home;
    rt.incalls_queued.add();
    home->inbox.push(t);
    notify_capability(home);
  }

  schedule(task);  // returns once t has finished and the capability is given up
  if (rt.tracing) [[unlikely]]
    trace_in_call(task, thread_no, started_ns);

  bool finished = task->bound_done;
  task->bound_done = false;
  task->bound_thread = saved_bound;
  task->sched_sp = saved_sp;
  task->tsan_fiber = saved_fiber;
  task->native_stack_lo = saved_lo;
  task->native_stack_size = saved_size;
  if (!outer) set_my_task(nullptr);
  tl_here = {};
  // `count` lets the runtime go as we return.  Not finished: only if the
  // runtime stopped first (our thread was abandoned at shutdown).
  if (!finished) throw thread_killed{};
}

}  // namespace capstan::detail

// ---------------------------------------------------------------- dump_threads

namespace capstan {

// dump_threads may be called from any OS thread (a watchdog, say): from
// one that is not the runtime's it counts as an in-call while it reads, so
// the Runtime it walks cannot be freed under it (Note [In-calls]).
void dump_threads(std::FILE* out) {
  if (!out) throw usage_error("capstan::dump_threads: the FILE* is null; pass stderr or an open file");
  if (rts::my_task() && rts::process.running.load(std::memory_order_relaxed)) {
    rts::dump_all_threads(out, "dump_threads");
    return;
  }
  detail::InCallCount count;
  if (!count.accept()) {
    std::fputs("capstan: thread dump: no runtime is running\n", out);
    return;
  }
  rts::dump_all_threads(out, "dump_threads");
}

}  // namespace capstan
