// yield.cpp - giving the capability up voluntarily: yield, safe points
// (where a thread answers the ticker, an interrupt or a returning safe
// call), and the shutdown checkpoints every safe point contains.
#include <exception>

#include "capstan/errors.hpp"
#include "capstan/thread.hpp"
#include "schedule/pick.hpp"
#include "schedule/raise.hpp"
#include "schedule/raise_killed.hpp"
#include "schedule/schedule.hpp"
#include "schedule/switch.hpp"
#include "sparks/pool.hpp"

namespace capstan::rts {

// Note [Shutdown checkpoints]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// During shutdown (rt.shutting_down, Note [Shutdown]) every thread but
// run()'s main - bound threads too - meets thread_killed at its next
// checkpoint, where check_killed runs:
//  * a call that would block: an mvar take/put/read (so also sleep_for
//    and fd waits), checked before it parks;
//  * a yield, and a safe point that finds its capability's context_switch
//    word set: shutdown interrupts every capability once, and the ticker
//    expires a busy capability's timeslice every tick, so a thread that
//    computes and passes safe points meets one within a tick;
//  * a safe call's entry, and its return unless the call threw.
// A thread that has not started when shutdown begins never runs its body
// (thread_entry, schedule/fork.cpp); bound threads always start, and meet
// their first checkpoint instead.  At a checkpoint:
//  * after stop (the grace period is over) the thread is abandoned: it
//    switches to its Task's scheduler context and is never resumed; its
//    closure and stack are freed without unwinding (shutdown/shutdown.cpp);
//  * otherwise, if its capability has another thread to run, it first
//    requeues itself at the back and switches to it - so a thread that
//    catches thread_killed and calls in again, in a loop, cannot keep the
//    main thread (which drives shutdown) off its capability - and then it
//    throws thread_killed (or is abandoned, if stop came meanwhile).
// While the thread is unwinding (uncaught_exceptions() > 0) nothing is
// thrown - throwing from a destructor would terminate() - and its blocking
// calls park as usual (the killer leaves such a waiter alone: Note
// [Killing a blocked thread]); it is still abandoned after stop.  The same
// holds while it runs under uninterruptible_mask.
//
// Note [Shutdown and uninterruptible_mask]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Shutdown's kill ignores mask (a thread that masks and blocks would
// otherwise hold shutdown for the grace period) but not
// uninterruptible_mask, which a program uses exactly where an exception
// cannot be taken: the runtime's own cancellation in ~async and cancel()
// (implicitly noexcept: thread_killed out of it was std::terminate when
// shutdown began while an async scope waited for its child), a barrier's
// completion function.  Such a thread is treated as one unwinding: its
// checkpoints throw nothing, and the killer leaves its waits alone - the
// child it waits for is being killed too, and wakes it as it finishes;
// if nothing can wake it, it is abandoned as a thread blocked while
// unwinding is (Note [Blocked while unwinding] in shutdown/shutdown.cpp).
// It meets thread_killed at its first checkpoint once it unmasks.  One
// that runs on instead is bounded by the grace period like a thread that
// swallows thread_killed - except in a loop of safe calls, which shutdown
// waits for and never abandons: so once the grace period is over and
// shutdown waits only for safe calls (rt.grace_over), such a thread - or
// one unwinding - is abandoned at its next checkpoint, the entry to its
// next safe call among them.  Threads forked under uninterruptible_mask
// inherit it: at shutdown they are not unwound, but abandoned, after up
// to the grace period, unless they unmask or finish.
namespace {

[[noreturn]] void abandon_current(Thread* t) {
  Task* task = my_task();
  t->state = ThreadState::blocked;
  t->why = WhyBlocked::on_shutdown;
  switch_to(task, task->cap, t, nullptr, false, SwitchWhy::abandoned);
  __builtin_unreachable();  // nobody resumes an abandoned thread
}


}  // namespace

void check_killed(Thread* t) {
  if (!rt.shutting_down.load(std::memory_order_acquire) || t->is_main) return;
  if (rt.stop.load(std::memory_order_acquire)) abandon_current(t);
  const bool unkillable = std::uncaught_exceptions() != 0 || t->mask == Mask::uninterruptible;
  if (unkillable) {  // Note [Shutdown and uninterruptible_mask]
    if (rt.grace_over.load(std::memory_order_acquire)) abandon_current(t);
    return;
  }
  Task* task = my_task();
  Capability* cap = task->cap;
  Thread* next = pick(cap);
  if (next || cap->bound_next) {
    requeue_running(task, cap, t, false);
    switch_to(task, cap, t, next, false, SwitchWhy::yield);
  }
  if (rt.stop.load(std::memory_order_acquire)) abandon_current(t);
  raise_killed(false);
}

// Note [A yield rotates in one hand-shake]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A yield takes the front thread and puts the yielding one at the back
// (Note [Requeue front or back] in schedule/schedule.cpp).  Done as pick,
// then requeue_running, that is two operations on the run queue, each in
// its own hand-shake with thieves (Note [Stealing from a stalled
// capability] in schedule/steal.cpp: two stores and a load) and each
// loading and storing the size.  So the yield marks itself as leaving
// first (mark_leaving: runnable, `leaving` set, its unlock queued for the
// landing side) and pick_behind pops the front and links the yielder at
// the back inside one hand-shake.  The order of events a thief or
// push_work can see is the old one: the yielder is in the queue only
// with `leaving` set, which both skip until the landing side clears it.
// If the queue gave nothing (the pop found it empty, or stop was set:
// no thread returned and bound_next still clear), the yielder was not
// queued and stay_running takes the marks back; if it gave another
// Task's bound thread (pick leaves it in bound_next and returns null),
// the yielder was queued and switches to the scheduler context, as
// before.  pick_behind expects bound_next clear, so the yield tests it
// first; with it set on entry (pick would not pop) the yield queues
// itself the old way.  callgrind, `switch
// 1000000 +RTS -N1`: 203 -> 192 instructions a yield; interleaved
// against the commit before, medians of 15, `switch 10000000 +RTS -N1`
// 12.27 -> 11.71 ns (docs/benchmarks.md, "A yield rotates in one
// hand-shake").  RunQueue::pop_front must stay a plain inline function:
// marked always_inline, GCC 12 dropped the prefetch of Note [Prefetching
// the next thread] from every pick (24 prefetches in the binary -> 2),
// and threads003 lost 9 %.

void yield_current() { yield_current_because(SwitchWhy::yield); }

void yield_current_because(SwitchWhy why) {
  Task* task = green_task_before_switch();
  if (!task) [[unlikely]] task = require_green_thread("capstan::yield");  // throws
  Capability* cap = task->cap;
  Thread* cur = cap->current;
  // Cleared only by an RMW that reads it (Note [Raising asynchronously]).
  // A yield is a safe point: an expired timeslice also expires the
  // thread's due timeouts here, or a loop of yields would never see its
  // timeout fire (Note [Timeouts] in io/timeouts.cpp).
  if (cap->context_switch.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    std::uint32_t why = cap->context_switch.exchange(0, std::memory_order_acquire);
    if (cur->timeouts && (why & kTimesliceExpired)) expire_due_timeouts(cur);
  }
  if (rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] check_killed(cur);
  raise_pending(cur, false);
  // Note [A wanted spark does not wait behind its thief] (sparks/pool.cpp).
  if (cap->n_stolen_sparks.load(std::memory_order_relaxed) != 0) [[unlikely]]
    start_wanted_sparks(cap);
  Thread* next;  // See Note [A yield rotates in one hand-shake]
  if (!cap->bound_next) [[likely]] {
    mark_leaving(task, cur);
    next = pick_behind(cap, cur);
    if (!next && !cap->bound_next) {  // the queue gave nothing: keep going
      stay_running(task, cur);
      return;
    }
  } else {  // the scheduler context gives the capability away first
    next = nullptr;
    requeue_running(task, cap, cur, false);
  }
  switch_to(task, cap, cur, next, false, why);
  if (rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] check_killed(cur);
  raise_pending(cur, false);
}

void yield_point_slow() {
  Task* task = require_green_thread("capstan::yield_point");
  Capability* cap = task->cap;
  // Acquire: pairs with a thrower's release (Note [Raising asynchronously]).
  std::uint32_t why = cap->context_switch.exchange(0, std::memory_order_acquire);
  cap->sched_epoch.store(cap->sched_epoch.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);  // a quiescent point too
  check_killed(cap->current);
  if (cap->current->timeouts && (why & kTimesliceExpired)) [[unlikely]]
    expire_due_timeouts(cap->current);  // Note [Timeouts] in io/timeouts.cpp
  raise_pending(cap->current, false);
  if (why & kReturning) {
    // Note [Returning from a safe call]: the returner goes first, and we
    // keep our place right behind it.
    Thread* cur = cap->current;
    // Its timeslice may have expired too: then it goes to the back.
    requeue_running(task, cap, cur, !(why & kTimesliceExpired));
    Thread* next = pick(cap);
    if (next == cur) {
      stay_running(task, cur);
      return;
    }
    switch_to(task, cap, cur, next, false, SwitchWhy::preempted);
  } else if (why & kTimesliceExpired) {
    yield_current_because(SwitchWhy::timeslice);  // See Note [Requeue front or back]: back
  } else if (why & kInterrupt) {
    // Interrupted, not expired: the thread keeps the front of the queue, so
    // after the interrupt's work (the inbox) it simply continues.
    drain_inbox(cap);
  }
}

}  // namespace capstan::rts

namespace capstan {

void yield() { rts::yield_current(); }

namespace detail {

void safe_point() {
  rts::Task* task = rts::green_task_before_switch();  // no switch before its last use
  if (task && task->cap->context_switch.load(std::memory_order_relaxed) != 0) [[unlikely]]
    rts::yield_point_slow();
}

}  // namespace detail
}  // namespace capstan
