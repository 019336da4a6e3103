// fork.cpp - a green thread's life as the scheduler sees it: made
// runnable (fork_io, fork_on, fork_os), started (thread_entry), finished.
// Allocation, ids and teardown of the Thread object are thread/threads.cpp.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "capstan/errors.hpp"
#include "capstan/mvar.hpp"
#include "capstan/thread.hpp"
#include "mvar/event.hpp"
#include "primitives/sanitizer.hpp"
#include "schedule/pick.hpp"
#include "schedule/raise.hpp"
#include "schedule/schedule.hpp"
#include "schedule/switch.hpp"
#include "primitives/say.hpp"
#include "task/handover.hpp"

namespace capstan::rts {

namespace {

void report_uncaught(Thread* t, const char* what) {
  t->home->all_lock.lock();  // labels are guarded by it (label_thread)
  std::string label = t->label ? *t->label : "unlabelled";
  t->home->all_lock.unlock();
  say("capstan: uncaught exception in thread {} ({}): {}\n", t->id, label, what);
  my_task()->cap->uncaught_exceptions.add();
}

void notify_shutdown() {
  // Note [Shutdown]: every finish during shutdown pokes the main thread.
  if (rt.shutdown_events) rt.shutdown_events->notify();
}

// Note [Finishing a thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A finished thread stands on the stack it would free.  It picks its
// successor, leaves itself in task->post.dead, and switches away telling
// ASan it leaves for good; the landing side (after_switch) returns the
// stack to the capability's pool and the Thread to its free list.
[[noreturn]] void finish_current(Thread* self) {
  Task* task = my_task();
  Capability* cap = task->cap;
  unlink_from_home(self, /*holder=*/self->home == cap);
  finish_pending(self, cap);  // throwers waiting on us return (Note [Raising asynchronously])
  self->state = ThreadState::finished;
  cap->threads_finished.add();
  if (rt.shutting_down.load(std::memory_order_acquire)) [[unlikely]] notify_shutdown();
  // A fork_os or in-call thread's Task leaves with it (Note [Bound threads]).
  bool task_leaves = self == task->bound_thread && !self->is_main;
  if (task_leaves) [[unlikely]] {
    task->bound_thread = nullptr;
    task->bound_done = true;
  }
  Thread* next = task_leaves ? nullptr : pick(cap);
  task->post.leave_dead(self);
  switch_to(task, cap, self, next, /*from_dying=*/true, SwitchWhy::finished);
  __builtin_unreachable();
}

}  // namespace

// Note [Where a kill is caught]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Unwinding costs per frame walked, twice (the search phase and the
// cleanup phase each walk from the throw to the handler): about 550 ns a
// frame with a destructor on this machine (docs/benchmarks.md, "What a frame
// costs").  A killed thread's walk ends at the first frame with a handler,
// so the handler sits as near the user's frames as the runtime can put it:
// in ops_for<F>::invoke (detail/bridge.hpp), which calls the closure
// directly, rather than here in thread_entry, one frame further up.  invoke
// catches only thread_killed (and classes derived from it, as the handler
// below would); everything else - an error, blocked_indefinitely, a forced
// unwind - passes it by to thread_entry's handlers, with no rethrow.  (A
// catch (...) that sorted exceptions by their type_info was tried first: it
// read garbage for a foreign exception, whose libstdc++ header is not a
// __cxa_exception.)  A blocked thread that is killed
// throws a fresh thread_killed (waiter::kill_raised, Note [Raising
// asynchronously] in schedule/raise.cpp) from raise_outcome, called by
// the inline park in the blocking call (Note [Throwing from the caller's
// frame] in detail/mvar_core.hpp), so its walk is raise_outcome, the
// blocking call's and the user's frames, and invoke.
[[noreturn]] void thread_entry(void* arg) {
  if (rt.sanitizers && san::asan()) [[unlikely]]
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  after_switch(static_cast<PostSwitch*>(arg));
  Thread* self = my_task()->cap->current;
  // On a reserve stack (Note [Running out of stacks] in storage/stack.cpp):
  // a fresh stack, with room for the one line that says why.
  if (self->on_reserve) [[unlikely]] rt.arena.warn_once();
  // Bound threads always start: a fork_os or in-call thread's Task waits for
  // it; it meets thread_killed at its first checkpoint instead (Note
  // [Shutdown checkpoints] in schedule/yield.cpp).
  if (rt.shutting_down.load(std::memory_order_acquire) && !self->bound) [[unlikely]] {
    // Reclaimed before it ever ran: killed, as a thread killed before its
    // first run is, so counted as having died too.  A spark thread is the
    // runtime's: it just ends (Note [Spark threads at shutdown] in
    // sparks/sparks.cpp).
    if (!self->spark_thread) {
      Capability* cap = my_task()->cap;
      cap->threads_killed.add();
      cap->threads_died.add();
      rt.fates.died(self->id);
      self->trace_killed = true;
    }
  } else if (self->on_reserve && !self->bound && !self->is_main) [[unlikely]] {
    // No stack could be had: end before running (Note [Running out of
    // stacks] in storage/stack.cpp).
    Capability* cap = my_task()->cap;
    cap->threads_unstarted.add();
    cap->threads_died.add();
    rt.fates.died(self->id);
  } else {
    bool died = true;
    bool killed = false;
    try {
      // An exception thrown before the thread ever ran is raised here, so
      // an unmasked thread killed early never runs its body (as in GHC).
      raise_pending(self, false);
      // false: killed, caught in invoke (Note [Where a kill is caught]).
      if (self->ops->invoke(self->closure)) died = false; else killed = true;
    } catch (const thread_killed&) {
      killed = true;
    } catch (const blocked_indefinitely&) {
      // As GHC's childHandler: a forked thread that can never be woken
      // ends quietly (counted in the statistics).
      my_task()->cap->threads_blocked_indefinitely.add();
    } catch (const std::exception& e) {
      report_uncaught(self, e.what());
    } catch (...) {
      report_uncaught(self, "unknown exception (not derived from std::exception)");
    }
    if (killed) {
      my_task()->cap->threads_killed.add();
      self->trace_killed = true;
    }
    if (died) [[unlikely]] {
      my_task()->cap->threads_died.add();
      rt.fates.died(self->id);  // for state_of (thread/fates.hpp)
    }
  }
  self->ops->destroy(self->closure);
  finish_current(self);
}

}  // namespace capstan::rts

namespace capstan::detail {

// As thread_entry counts a forked thread's exception, for threads whose
// wrapper caught it (bridge.hpp).
void count_ended_by(const std::exception_ptr& e) noexcept {
  rts::Task* task = rts::my_task();
  if (!e || !task || !task->cap) return;
  rts::Capability* cap = task->cap;
  rts::Thread* self = cap->current;
  try {
    std::rethrow_exception(e);
  } catch (const thread_killed&) {
    cap->threads_killed.add();
    self->trace_killed = true;
  } catch (const blocked_indefinitely&) {
    cap->threads_blocked_indefinitely.add();
  } catch (...) {
  }
  cap->threads_died.add();
  // Not rt.fates.died: the thread itself finishes - its wrapper caught the
  // exception - and state_of says finished, as GHC's threadStatus does for
  // an async's thread.
}

}  // namespace capstan::detail

namespace capstan::rts {

// reserve_stack: see Note [Running out of stacks] in storage/stack.cpp.
void* reserve_stack(Thread* t) {
  void* s = rt.arena.take_reserve();
  if (!s) {
    // Inside a switch, on a stack that may be nearly full: no fprintf.
    static constexpr char kMsg[] =
        "capstan: out of memory for green-thread stacks, and every reserve stack is in use "
        "by a thread without one; cannot run the next thread\n";
    [[maybe_unused]] auto n = ::write(2, kMsg, sizeof kMsg - 1);
    std::abort();
  }
  t->on_reserve = true;
  return s;
}

namespace {

// A fork_os thread's OS thread: serves its bound thread until it finishes.
void bound_task_body(Task* task) { schedule(task); }

void enqueue_new(Capability* cap, Thread* t, Capability* target) {
  t->cap = target;
  t->state = ThreadState::runnable;
  if (target == cap) {
    cap->run_queue.push_back(t);  // pushed on to idle capabilities by pick
  } else {
    target->inbox.push(t);
    notify_capability(target);
  }
}

}  // namespace

// Note [Fork back-pressure]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread that forks in a loop would, within one 20 ms timeslice, queue
// hundreds of thousands of threads whose Thread objects and closures have
// long left the cache by the time they run, and whose memory is all live at
// once.  So when its capability's run queue reaches kForkBackPressure
// threads, the forker's timeslice is expired early: at the fork's safe point
// it goes to the back (the usual rule), the threads it made run while they
// are still in cache, and it resumes after them.  New threads still go to
// the back; this only shortens the forker's slice.  Memory for pending new
// threads is bounded by the queue length rather than by the timeslice.
detail::thread_ref start_thread(Thread* t, const detail::closure_ops* ops, long long cap_no) {
  Task* task = my_task();
  Capability* cap = task->cap;
  t->ops = ops;
  t->id = next_thread_id(cap);
  t->live_id.store(t->id, std::memory_order_relaxed);
  // A forked thread inherits its parent's mask state (GHC's forkIO).
  if (cap->current) t->mask = cap->current->mask;
  link_home(cap, t, /*holder=*/true);
  Capability* target = cap;
  if (cap_no == detail::kBoundOsThread) {
    // fork_os: Note [Bound threads].  The OS thread starts first (it may
    // fail, and then nothing has happened), then waits for the thread.
    target = rt.caps[rt.next_bound_cap.fetch_add(1, std::memory_order_relaxed) % rt.n_caps];
    Task* b = new_task(TaskKind::os_bound);
    b->bound_thread = t;
    b->last_cap = target;
    t->bound = t->locked = true;
    t->bound_task = b;
    try {
      start_os_thread(b, &bound_task_body);
    } catch (...) {
      unlink_from_home(t, /*holder=*/true);
      t->ops = nullptr;
      discard_thread(t);
      throw;
    }
  } else if (cap_no >= 0) {
    target = rt.caps[static_cast<unsigned long long>(cap_no) % rt.n_caps];
    t->locked = true;
  }
  cap->threads_created.add();  // only once nothing can fail: never undone
  detail::thread_ref id = ref_of(t);  // t may run (and finish) elsewhere from here on
  enqueue_new(cap, t, target);
  // See Note [Fork back-pressure].
  if (cap->run_queue.size() >= kForkBackPressure) [[unlikely]]
    request_context_switch(cap);
  // Every runtime call is a safe point.
  if (cap->context_switch.load(std::memory_order_relaxed)) [[unlikely]] yield_point_slow();
  return id;
}

}  // namespace capstan::rts

namespace capstan::detail {

thread_slot thread_alloc(std::size_t size, std::size_t align, long long cap) {
  rts::Thread* t = rts::alloc_thread(size, align,
                                     cap == kBoundOsThread ? "capstan::fork_os"
                                     : cap < 0             ? "capstan::fork_io"
                                                           : "capstan::fork_on");
  return {t, t->closure};
}

void thread_discard(rts::Thread* thread) noexcept { rts::discard_thread(thread); }

thread_ref thread_start(rts::Thread* thread, const closure_ops* ops, long long cap) {
  return rts::start_thread(thread, ops, cap);
}

}  // namespace capstan::detail
