// schedule.cpp - the scheduler loop (GHC's schedule()), and the policy of
// everything in schedule/ that moves a green thread between running,
// runnable, blocked and finished:
//   switch.hpp    switch_to / after_switch          pick.hpp      pick
//   yield.cpp     yield, safe points, checkpoints   park.hpp      park_current
//   block.cpp     wake, migrate                     idle.cpp      idle, sleep
//   fork.cpp      start, entry, finish
//   push_work.cpp spreading work to idle capabilities
//   steal.cpp     idle capabilities rescuing a stalled one's threads
//
// Policy in one paragraph (GHC's Schedule.c, adapted):
// Each capability runs the threads of its own run queue; other capabilities
// and OS threads reach it only through its inbox.  A thread runs until it
// yields, blocks, finishes, or reaches a safe point after its timeslice
// expired; it is then requeued by the rules of Note [Requeue front or back]
// and the next thread is switched to *directly* (Note [Direct switching]).
// An idle capability spins briefly, then sleeps on its Task's futex until
// work arrives in its inbox (Note [Sleeping capabilities]).  Busy
// capabilities push surplus threads to idle ones (Note [Pushing work]);
// a capability that stops scheduling (a thread computing without a safe
// point) has its waiting threads taken by idle ones (Note [Stealing from a
// stalled capability]); woken threads follow their waker (Note [Wake-up
// affinity]).
//
// Rejected alternatives:
//  * Every switch through a scheduler stack (GHC's StgRun returns to
//    schedule()): two switches per hand-off instead of one.
//  * Work stealing of runnable threads with a Chase-Lev run queue: every
//    owner pop then needs a store-load fence (~2.3 ns here), and stolen
//    threads break producer/consumer pairs apart.  Pushing keeps the run
//    queue free of locked instructions and is measured in nofib_like
//    (docs/benchmarks.md); stealing is kept for the one case pushing
//    cannot serve, a capability that no longer schedules, and its cost is
//    put on the thief (an asymmetric hand-shake).
//  * One global run queue: a lock on every hand-off.
//
// Note [Requeue front or back]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where a thread goes when it stops running:
//   timeslice expired (ticker set kTimesliceExpired) -> back of the queue
//   yield()                                          -> back
//   woken after blocking                             -> back of its
//       capability's queue, through that capability's inbox if the waker
//       runs elsewhere (and see Note [Wake-up affinity])
//   new thread (fork_io)                             -> back, as GHC's
//       scheduleThread, so a forking loop cannot starve older threads
//   interrupted (kInterrupt: shutdown, a thrower with an exception for a
//       thread here, switch_to finding one pending for the thread it
//       switches to) -> front: it stopped for no fault of its own, so it
//       keeps its place and its cache; in practice it handles the interrupt
//       and simply continues.
// Every bit is set with fetch_or and cleared only by an RMW that reads it
// (Note [Raising asynchronously] relies on that), never by a plain store;
// and whatever must not be lost also has a flag of its own
// (rt.shutting_down, a thread's async_pending).
// Back for fairness (round robin), front for anything that is not about
// fairness; the context-switch flag is cleared when the switch is actually
// made, not before a thread runs, so a tick is never lost (GHC clears it
// the same way, after once losing ticks by clearing it earlier).
//
// Note [Direct switching]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A thread that stops picks its successor itself and switches straight to
// it: yield costs one context switch.  Only when the run queue and inbox
// are empty does it switch to its Task's scheduler context (schedule()),
// which idles.  Code running after a switch may be on another OS thread:
// after capstan_switch returns, nothing cached before it (Task*,
// Capability*) is used; see Note [TLS across a switch] in task/task.hpp.
// What the leaving side cannot do itself (release the lock it blocked
// under, recycle its own stack) it leaves in task->post, and the landing
// side does it in after_switch().

#include "schedule/schedule.hpp"

#include <cstdlib>

#include "schedule/idle.hpp"
#include "schedule/pick.hpp"
#include "schedule/switch.hpp"
#include "task/handover.hpp"
#include "task/overflow_handler.hpp"

namespace capstan::rts {

// Note [Bound threads]
// ~~~~~~~~~~~~~~~~~~~~
// A bound thread (run()'s main, fork_os, an in-call) runs only on its
// bound_task's OS thread, and is locked to one capability.  When a Task
// picks another Task's bound thread it does not run it: it switches to its
// scheduler context, which gives the capability and the thread to the bound
// Task (give_capability_to_task, Note [Handing over a capability]) and then
// waits, capless, as a spare (a worker) or for its own bound thread's turn
// (a bound Task).
// Unlike GHC, a bound Task is not reserved for its thread: while it holds
// the capability it runs unbound threads too, switching to them directly.
// So an MVar hand-off between the bound main thread and an unbound thread
// is an ordinary green switch on the main OS thread (boundpingpong), and an
// OS-level hand-over happens only when two different Tasks' bound threads
// take turns on one capability, or after a safe call let a spare in.  The
// bound semantics hold: a bound thread's code only ever runs on its own OS
// thread (tests/rts/foreign/bound_test.cpp checks gettid()).
// A fork_os or in-call Task leaves schedule() when its thread finishes,
// giving its capability up (release_capability).
void schedule(Task* task) {
  for (;;) {
    Capability* cap = task->cap;
    if (!cap) {
      if (task->bound_done) return;
      // A worker with nothing to serve waits as a spare, or exits if its
      // capability has enough of them.
      // (A new worker was handed its capability before it started.)
      if (!task->bound_thread && !task->given.load(std::memory_order_acquire) &&
          !become_spare(task))
        return;
      if (!wait_for_capability(task)) return;  // the runtime stopped
      if (Thread* first = task->given_thread) {
        task->given_thread = nullptr;
        switch_to(task, task->cap, nullptr, first, false);
      }
      continue;
    }
    if (task->bound_done) [[unlikely]] {
      release_capability(task);
      return;
    }
    if (task->give_cap_to_spare) [[unlikely]] {
      // Note [Unbound threads on a bound Task]: the thread that left waits
      // at the front of the queue for a spare.
      task->give_cap_to_spare = false;
      give_capability_to_spare(drop_capability(task));
      continue;
    }
    if (Thread* h = cap->bound_next) [[unlikely]] {
      cap->bound_next = nullptr;
      give_capability_to_task(h->bound_task, drop_capability(task), h);
      continue;
    }
    if (Thread* t = pick(cap)) {
      switch_to(task, cap, nullptr, t, false);
      continue;
    }
    if (cap->bound_next) continue;
    if (rt.stop.load(std::memory_order_acquire)) return;
    idle(task, cap);
  }
}

void switch_to_scheduler_capless(Task* task, Thread* cur) {
  switch_to(task, nullptr, cur, nullptr, false);
}

void move_off_bound_task(Task* task, Thread* cur) {
  Capability* cap = task->cap;
  // cur is unbound (it runs on a bound Task that is not its own), so a
  // thief or push_work could take it: requeue_running's `leaving` keeps
  // them off until the switch below has left its stack.
  requeue_running(task, cap, cur, true);
  task->give_cap_to_spare = true;  // done by our scheduler context
  switch_to(task, cap, cur, nullptr, false, SwitchWhy::migrated);
}

[[noreturn]] void fatal_stack_overflow(Thread* t) {
  report_stack_overflow(t);
  std::abort();
}

}  // namespace capstan::rts
