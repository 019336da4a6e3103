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
// Start and stop: accepting_incalls is set once run() has started every
// capability and cleared first thing at shutdown.  A caller increments
// rt.incalls (seq_cst) before reading the flag (seq_cst); shutdown clears
// the flag before it reads the count, so it either refuses the call or
// waits for it (Dekker again); run() frees nothing until the count is 0.
#include <climits>
#include <cstring>

#include "../runtime.hpp"
#include "../sanitizer.hpp"
#include "../scheduler.hpp"
#include "../task/handover.hpp"
#include "capstan/errors.hpp"
#include "capstan/foreign.hpp"
#include "../sparks/sparks.hpp"

namespace capstan::detail {

using namespace capstan::rts;

namespace {

struct InCallClosure {
  void (*fn)(void*);
  void* ctx;
};
void incall_invoke(void* p) {
  auto* c = static_cast<InCallClosure*>(p);
  c->fn(c->ctx);
}
void incall_destroy(void*) noexcept {}
constexpr closure_ops kInCallOps{&incall_invoke, &incall_destroy};

// This OS thread's Task for in-calls, valid in run number `epoch` only.
struct ForeignSlot {
  Task* task = nullptr;
  std::uint64_t epoch = 0;
};
thread_local ForeignSlot tl_foreign;

void leave_incall() {
  if (rt.shutting_down.load(std::memory_order_acquire) && rt.shutdown_events)
    rt.shutdown_events->notify();
  // Last touch of the runtime: run() may free everything once this is 0.
  // run() waits on the count only after setting stop, so the futex wake (a
  // system call) is needed only then: seq_cst on both sides - run() stores
  // stop, then reads the count; we decrement, then read stop - so either
  // run() sees our decrement or we see stop.
  if (rt.incalls.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      rt.stop.load(std::memory_order_seq_cst))
    futex_wake(&rt.incalls, INT_MAX);
}

Capability* claim_any(Capability* hint) {
  if (try_claim(hint)) return hint;
  for (Capability* c : rt.caps)
    if (c != hint && try_claim(c)) return c;
  return nullptr;
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
  rt.incalls.fetch_add(1, std::memory_order_seq_cst);
  if (!rt.accepting_incalls.load(std::memory_order_seq_cst)) {
    bool running = rt.running.load();
    leave_incall();
    throw usage_error(running ? "capstan::call_in: the runtime is starting or shutting down; "
                                "calls into it are accepted only while capstan::run runs"
                              : "capstan::call_in: no runtime is running; call it while "
                                "capstan::run is active");
  }
  if (!task) {
    if (tl_foreign.epoch != rt.epoch || !tl_foreign.task) {
      tl_foreign.task = new_task(TaskKind::foreign);
      tl_foreign.epoch = rt.epoch;
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

  Capability* hint = task->last_cap ? task->last_cap
                                    : rt.caps[rt.next_bound_cap.fetch_add(1, std::memory_order_relaxed) % rt.n_caps];
  Capability* got = claim_any(hint);
  Capability* home = got ? got : hint;
  InCallClosure closure{fn, ctx};
  Thread* t = create_incall_thread(task, home, &kInCallOps, &closure, sizeof closure);
  task->bound_thread = t;
  task->bound_done = false;
  if (got) {
    take_capability(task, got);
    got->run_queue.push_front(t);
  } else {
    task->last_cap = home;
    home->inbox.push(t);
    notify_capability(home);
  }

  schedule(task);  // returns once t has finished and the capability is given up

  bool finished = task->bound_done;
  task->bound_done = false;
  task->bound_thread = saved_bound;
  task->sched_sp = saved_sp;
  task->tsan_fiber = saved_fiber;
  task->native_stack_lo = saved_lo;
  task->native_stack_size = saved_size;
  if (!outer) set_my_task(nullptr);
  tl_spark_pool = nullptr;
  leave_incall();
  // Only if the runtime stopped first (its thread was abandoned at shutdown).
  if (!finished) throw thread_killed{};
}

}  // namespace capstan::detail
