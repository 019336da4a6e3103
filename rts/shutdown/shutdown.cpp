// shutdown.cpp - ending a run: killing every thread but main, abandoning
// the ones that will not die, and reclaiming what they held (GHC's
// RaiseAsync.c and the exit half of Schedule.c).  The checkpoints where a
// running thread meets thread_killed are the scheduler's: Note [Shutdown
// checkpoints] in schedule/yield.cpp.
//
// Note [Shutdown]
// ~~~~~~~~~~~~~~~
// When run()'s main function returns, the main green thread (still running,
// bound to capability 0) reclaims every other thread before anything stops:
//  1. shutting_down = true, and every capability is interrupted, so a
//     running thread throws thread_killed from its next runtime call or
//     safe point, and a thread that has not started never runs its body.
//     Stacks of finishing threads stay resident from here on (Note
//     [Keeping stacks at shutdown] in storage/stack.cpp).
//  2. Every blocked thread is woken with thread_killed
//     (Note [Killing a blocked thread]); its stack unwinds and its
//     destructors run - nothing a thread owns is leaked.
//  3. The main thread waits on rt.shutdown_events, which each finishing
//     thread, each in-call leaving, and each tick (as a clock) pokes, and
//     repeats 2 until only it is left and no in-call is in progress.  A thread that swallows thread_killed and blocks again is
//     killed again; one that has not finished once kShutdownGrace has
//     passed with no thread finishing is
//     abandoned - its stack is freed without unwinding - and reported on
//     stderr by id and label; so, at once, are threads blocked while
//     unwinding once nothing can wake them (Note [Blocked while unwinding]).  A thread inside a safe call runs foreign code
//     on its own stack: shutdown waits for the call to return (saying so on
//     stderr once), and the thread then meets thread_killed.  Every thread's fate is counted in the
//     statistics: finished, killed, or abandoned.
//  4. stop = true; every capability's scheduler returns; run_main waits for
//     the worker Tasks' OS threads and the in-calls to leave, stops the
//     ticker and the IO manager, frees what abandoned threads held
//     (reclaim_leftovers), and destroys the Runtime (Note [The runtime's
//     life cycle]); run() returns main's result.
// GHC kills threads at exit without running their handlers; C++ has no
// other way to run destructors than unwinding, hence thread_killed.
#include "shutdown/shutdown.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "capstan/mvar.hpp"
#include "capstan/thread.hpp"
#include "io/io_manager.hpp"
#include "mvar/event.hpp"
#include "runtime/runtime.hpp"
#include "schedule/raise.hpp"
#include "schedule/schedule.hpp"
#include "primitives/clock.hpp"
#include "primitives/say.hpp"
#include "stats/stats.hpp"
#include "task/handover.hpp"
#include "thread/dump.hpp"

namespace capstan::rts {

// Note [Killing a blocked thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At shutdown every blocked thread is woken with thread_killed so its stack
// unwinds and its destructors run.  The killer must find the mvar the thread
// waits on, but that mvar may be destroyed concurrently (its waiters are then
// orphaned).  During shutdown Thread::wait_lock guards blocked_on/waiter: the
// blocker sets them, and a waker or an mvar's destructor clears them, under
// it (while holding the mvar lock: order mvar lock -> wait_lock).  The
// killer holds wait_lock while it *tries* to take the mvar lock (the reverse
// order, so it only tries, and on failure backs off and is retried on the
// next sweep).  While the killer holds wait_lock with blocked_on == m, m
// cannot finish being destroyed, so m is valid.  A waiter that blocked while
// unwinding (in a destructor) is not killed: see Note [Blocked while
// unwinding].
//
// wait_lock is skipped by blockers and wakers until someone needs it: the
// killer turns it on first (Note [Wait locks] in schedule/raise.cpp).
bool request_kill(Thread* t, unsigned* killed) noexcept {
  t->wait_lock.lock();
  detail::mvar_core* m = t->blocked_on;
  if (!m) {
    t->wait_lock.unlock();
    return true;
  }
  if (!m->try_lock()) {
    t->wait_lock.unlock();
    return false;
  }
  detail::waiter* w = t->waiter;
  // A thread that blocked while unwinding is not killed (see above): its
  // uncaught-exception count was saved with it when it switched out.
  // Nor is a shielded wait (a spark's destructor waiting for the spark:
  // Note [Completing a stolen spark] in sparks/sparks.cpp); its waker runs.
  // Nor one under uninterruptible_mask: Note [Shutdown and
  // uninterruptible_mask] in schedule/yield.cpp.  The test throw_to's
  // raising makes (mask itself is no shield against shutdown: only the
  // uninterruptible kind is).
  bool killable = interruptible_wait(t, /*ignore_mask=*/false);
  detail::wake_list regranted;  // Note [Leaving the shared_mutex queue]
  if (killable) {
    detail::leave_queue(*m, *w, regranted);
    w->outcome = detail::waiter::killed;
    t->blocked_on = nullptr;
    t->waiter = nullptr;
  }
  t->wait_lock.unlock();
  m->unlock();  // before waking: a killed thread may destroy m as it unwinds
  regranted.wake_all();
  if (killable) {
    wake(t);
    ++*killed;
  }
  return true;
}

// Note [Blocked while unwinding]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread that blocks in a destructor while it unwinds (from
// thread_killed or any other exception) cannot be interrupted: raising
// there would throw out of a destructor during unwinding, which C++ turns
// into terminate() - GHC, whose handlers run masked but interruptible,
// has no such limit.  So request_kill and post_throw leave it on its
// mvar's queue, where it stays an ordinary waiter: a put (from a thread
// unwinding in the same shutdown, say) wakes it, and it finishes its
// unwinding.  If nothing does, shutdown abandons it like a thread that
// swallows thread_killed (the rest of its stack is freed without
// unwinding; it is reported on stderr and counted in threads_abandoned;
// the exception it was unwinding from is never freed) - as soon as
// nothing *can* wake it any more, else when kShutdownGrace has passed.
//
// "Nothing can wake it" is deadlock detection's question (Note [Deadlock
// detection] in exception/deadlock.cpp), asked during shutdown with main
// parked on shutdown_events: the ticker's shutdown_tick finds no green
// thread running or runnable, no timer, sleep or fd wait pending, no safe
// call or in-call in progress, on two ticks running with no context switch
// in between (it does not wake main on the first, so that main's own
// wake-up does not count as movement), and - under the default policy - no
// OS thread that the runtime did not make (one could try_put into the
// mvar); `--deadlock-detection=off` leaves only the grace period, `force`
// ignores outside threads.  It then sets rt.shutdown_stuck and wakes main.
// Main sweeps once more: if that sweep killed nobody and every request
// landed, every thread still alive is blocked and none can be killed or
// woken - each is blocked while unwinding (or swallowed thread_killed and
// blocked again while unwinding) - so main abandons them at once.  If the
// sweep did kill someone (a thread blocked since the last sweep), the
// flag is dropped and the check starts over.  A put from a green thread
// still wakes such a thread as before: while that thread runs, the run is
// not quiet.  Tested in tests/rts/shutdown/shutdown_test.cpp.

// Note [Main yields between sweeps]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// shutdown_events is poked by every tick as well as by finishing threads,
// and wait() returns at once if it was poked since the last wait.  A sweep
// that outlasts a tick therefore found the event set every time, and main -
// holding capability 0, the only one at -N1 - swept again without ever
// letting the threads it had killed run: no thread finished, and the grace
// period ran out on all of them.  Under ThreadSanitizer a sweep over 1,800
// threads blocked in the IO manager was enough: every one was abandoned
// unwound (600 were not).  So main yields after each sweep: it goes behind
// the threads it woke, and sweeps again once they have had their turn.
// (A thread that swallows thread_killed keeps running between sweeps, as
// before; the grace period still ends it.)

namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(1);

// kill_sweep asks every blocked thread to die, counting in *killed those
// it woke; true if all requests landed.
bool kill_sweep(unsigned* killed) {
  bool all = true;
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->is_main) continue;
      if (!request_kill(t, killed)) all = false;
    }
    c->all_lock.unlock();
  }
  return all;
}

// in_safe_call: is t inside a safe call (its Task runs foreign code on its stack)?
bool in_safe_call(Thread* t) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (auto& task : rt.tasks)
    if (task->in_safe_call.load(std::memory_order_relaxed) == t) return true;
  return false;
}

// Threads still inside safe calls, for the shutdown report.
std::uint64_t safe_calls_in_progress(std::string* names) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  std::uint64_t n = 0;
  for (auto& task : rt.tasks) {
    Thread* t = task->in_safe_call.load(std::memory_order_relaxed);
    if (!t) continue;
    if (++n <= 10 && names) *names += fmt::format(" {}", t->id);
  }
  return n;
}

// abandoned_reason says why shutdown could not finish t: blocked while
// unwinding (and on what), or it caught thread_killed and carried on.  Main
// holds t's home all_lock; t may still be running elsewhere, so its fields
// are read as the thread dump reads them (snap: a racy snapshot, for a
// diagnostic).  Only a blocked thread's snapshot is stable: it saved its
// exception state when it switched out.
std::string abandoned_reason(const Thread* t, std::int64_t now) {
  std::string on = waits_on(t, now);
  bool unwinding = snap(t->has_eh) && snap(t->eh.uncaught) != 0;
  bool uninterruptible = snap(t->mask) == Mask::uninterruptible;
  if (on.empty()) {
    if (unwinding) return "still unwinding (running a destructor)";
    if (uninterruptible) return "still running under uninterruptible_mask";
    return "caught thread_killed and carried on";
  }
  if (unwinding) return fmt::format("blocked while unwinding, on {}", on);
  if (uninterruptible) return fmt::format("blocked under uninterruptible_mask, on {}", on);
  // A shielded wait (a spark's destructor waiting for a stolen spark) is not
  // killed: Note [Killing a blocked thread].
  if (snap(t->wait_tag.what) == detail::waiter::spark)
    return fmt::format("blocked on {}, a wait shutdown does not interrupt", on);
  return fmt::format("caught thread_killed, then blocked on {}", on);
}

// report_abandoned names the threads shutdown abandons, each with why it
// could not be finished; `stuck`: at once, since nothing could wake them
// (Note [Blocked while unwinding]), else after the grace period - where
// the ones blocked while unwinding are those something outside the runtime
// could still have woken (an fd wait, a sleep, an outside OS thread).
void report_abandoned(bool stuck) {
  std::string names;
  std::uint64_t n = 0;
  const std::int64_t now = now_ns();
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->is_main || in_safe_call(t)) continue;
      ++n;
      if (n <= 10)
        names += fmt::format(" {}({}: {})", t->id, t->label ? t->label->c_str() : "unlabelled",
                             abandoned_reason(t, now));
    }
    c->all_lock.unlock();
  }
  if (n && stuck)
    say("capstan: {} thread(s) blocked at shutdown where thread_killed cannot be raised (while "
        "unwinding, or under uninterruptible_mask), and nothing can wake them; abandoned without "
        "unwinding:{}{}\n",
        n, names, n > 10 ? " ..." : "");
  else if (n)
    say("capstan: {} thread(s) did not finish within {}s of shutdown's last progress; abandoned "
        "without unwinding:{}{}\n",
        n, kShutdownGrace.count(), names, n > 10 ? " ..." : "");
}

}  // namespace

// Note [Main at shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// Once main's function has returned, main is the runtime's: it runs this
// protocol, and an exception raised in it would leave the protocol half
// done - the capabilities never stopped, run() never returning.  Yet a
// thread that shutdown kills may well throw to main from its handler or a
// destructor (Haskell's `link`: "if I die, kill main").  So from here main
// counts as finished for throwers (GHC's throwTo to a finished thread:
// nothing happens, and the thrower returns):
//  * post_throw, under main's wait_lock and once it has matched main's
//    live id (so that the Thread object is main's), refuses a throw once
//    shutting_down is set: throw_to and kill_thread return as for a
//    finished thread;
//  * main stores shutting_down, then settles, under the same wait_lock,
//    every throw queued on it before (a thrower that found main masked
//    and waits for its throw to land; it may be one that shutdown will
//    not kill - blocked while unwinding - so waiting for a sweep to take
//    the throw back is not enough).  Main passes no safe point between its
//    function's return and the settling (enable_wait_locks, which may
//    yield, comes after it), so nothing is raised in between.
// The lock orders each post before the settling (settled) or after it
// (it sees shutting_down), so main's pending list stays empty after.  Tested by
// Shutdown.ThreadsThatThrowToMainFromTheirHandlersDoNotStopShutdown and
// Shutdown.AThrowQueuedOnMaskedMainIsSettledAtShutdown
// (tests/rts/shutdown/shutdown_test.cpp).
void shutdown_protocol() {
  process.accepting_incalls.store(false, std::memory_order_seq_cst);  // Note [In-calls]
  rt.shutting_down.store(true, std::memory_order_seq_cst);
  settle_pending(my_task()->cap->current, /*finished=*/false);  // Note [Main at shutdown]
  enable_wait_locks();  // Note [Wait locks] in schedule/raise.cpp
  sample_peaks();
  rt.arena.keep_memory();  // Note [Keeping stacks at shutdown] in storage/stack.cpp
  for (Capability* c : rt.caps) {
    interrupt_capability(c);
    notify_capability(c);
  }
  // The grace period runs from the last time a thread finished: a machine
  // slow to unwind 100,000 threads (-N8 on two cores took over a second)
  // is making progress, and only a run with nobody finishing for
  // kShutdownGrace has threads that refuse to die.
  auto deadline = std::chrono::steady_clock::now() + kShutdownGrace;
  std::uint64_t last_live = live_threads();
  bool reported_calls = false;
  rt.shutdown_stuck.store(false, std::memory_order_seq_cst);
  for (;;) {
    unsigned killed = 0;
    bool landed = kill_sweep(&killed);
    std::uint64_t live = live_threads();
    if (live <= 1 && process.incalls.load(std::memory_order_seq_cst) == 0) break;
    if (live < last_live) {  // progress: restart the grace period
      last_live = live;
      deadline = std::chrono::steady_clock::now() + kShutdownGrace;
    }
    // Note [Blocked while unwinding]: nothing can wake the rest.
    if (rt.shutdown_stuck.exchange(false, std::memory_order_seq_cst) && landed && killed == 0 &&
        process.incalls.load(std::memory_order_seq_cst) == 0 && safe_calls_in_progress(nullptr) == 0) {
      report_abandoned(/*stuck=*/true);
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      // Threads inside safe calls run foreign code on their own stacks: run()
      // waits for the calls to return (each thread then meets thread_killed
      // and unwinds).  Everyone else is abandoned.  Note [Shutdown].
      std::string names;
      rt.grace_over.store(true, std::memory_order_release);  // Note [Shutdown and uninterruptible_mask]
      std::uint64_t calls = safe_calls_in_progress(&names);
      if (calls == 0) {
        report_abandoned(/*stuck=*/false);
        break;
      }
      if (!reported_calls) {
        say("capstan: shutdown is waiting for {} thread(s) inside safe_call to return:{}{}\n",
            calls, names, calls > 10 ? " ..." : "");
        reported_calls = true;
      }
    }
    // See Note [Main yields between sweeps].
    yield_current();
    io_kick_quiet();  // Note [Quiet cancels at shutdown] in io/io_manager.cpp
    rt.shutdown_events->wait();  // a thread finished, or a tick passed
  }
  rt.stop.store(true, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (auto& t : rt.tasks) t->parker.unpark();
}

std::uint64_t reclaim_leftovers() {
  std::uint64_t abandoned = 0;
  for (Capability* c : rt.caps) {
    Thread* t = c->all_head;
    while (t) {
      Thread* next = t->all_next;
      if (!t->is_main) ++abandoned;
      if (t->blocked_on) {  // take it out of the mvar's queue for good
        t->blocked_on->lock();
        t->blocked_on->remove(*t->waiter);
        t->blocked_on->unlock();
      }
      if (t->ops) t->ops->destroy(t->closure);
      free_thread_resources(t);
      t = next;
    }
    c->all_head = nullptr;
  }
  rt.depot.release_all();  // every Thread object lives in its slabs
  return abandoned;
}

}  // namespace capstan::rts
