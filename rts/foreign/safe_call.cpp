// safe_call.cpp - safe foreign calls: the capability is released while the
// calling OS thread runs foreign code (GHC's suspendThread/resumeThread).
//
// Policy.  Entering a safe call releases the capability *lazily*: if the
// capability has nothing else to run, it is only marked free (one release
// store: Note [Lazy release]), and the caller takes it back on return with
// one CAS - no other
// OS thread is involved.  If it has work (runnable threads, sparks), or
// work arrives while the call is in progress (Note [Handing over a
// capability]: whoever sends it claims the free capability), a spare Task
// takes the capability over (task/handover.cpp).  This is GHC's
// releaseCapability_ (which starts a worker only if there is work) with Go's
// cheap exitsyscall fast path.
//
// Rejected: waking a spare at every call (GHC when work is queued, and our
// first version): a futex wake-up (5-25 us here) per call.  Go's sysmon
// retaking a P after 20 us: needs a monitor thread polling, and a thread
// woken meanwhile would wait for it.
//
// Note [Returning from a safe call]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// If the capability is still free when the call returns, the caller claims
// it and goes on.  Otherwise another Task holds it, and the caller must get
// back in with priority over ordinary scheduling (GHC's returning_tasks):
//  * an unbound thread need not continue on this OS thread: it switches to
//    its Task's scheduler context, whose after_switch queues it on the
//    capability's inbox marked `returning` and sets kReturning in the
//    capability's context_switch word.  The holder's next safe point (or
//    scheduling decision) drains the inbox putting it at the *front*, and
//    runs it; the interrupted thread keeps its place right behind it.  The
//    caller's Task becomes a spare (or exits, if the capability has enough).
//  * a bound thread must continue here: the Task queues the thread the same
//    way, as a token, and waits.  The holder that picks it sees it is bound
//    to another Task and gives the capability to this one (Note [Bound
//    threads]), which continues the thread where it stands.
// No wake-up is lost: the inbox push + notify_capability is the protocol of
// Note [Sleeping capabilities] / [Handing over a capability] (a sleeping
// holder is unparked, a free capability is claimed and passed to a spare),
// and the waiting Task is given the capability by give_capability_to_task(), whose `given`
// flag and sticky Parker survive any interleaving.  Latency: the returner
// waits for the holder's next safe point, not for a tick (GHC waits ~14 ms
// here for the tick that makes the holder yield).
// Checked by models/capability_handover.pml (docs/models.md).
//
// Note [Lazy release]
// ~~~~~~~~~~~~~~~~~~~
// The release at a safe call's entry is a *release* store, not the seq_cst
// store of Note [Handing over a capability]: a locked instruction costs
// ~10 ns on this machine, and a safe call already pays one for the CAS that
// takes the capability back.  Without the store-load order, a sender's load
// of `hold` may still read `held` while our store sits in the store buffer,
// and our check of the inbox may miss its push: the work would wait for the
// call to return.  The window is the store buffer's drain time (tens of
// ns), and the ticker closes it: every tick it claims any free capability
// whose inbox is non-empty (runtime/ticker.cpp), so such work waits at most one
// tick (<= 10 ms), never indefinitely; the ticker never parks while a
// capability is in a safe call (it is not idle).  Everything else that
// releases a capability (release_capability) uses the seq_cst hand-shake.
// This is Go's trade (sysmon retakes Ps in syscalls), with the common case
// handled without waiting for the monitor at all.
// Checked by models/capability_handover.pml, whose ticker-less variant strands work.
//
// Note [Deferred hand-off]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A safe call entered while other work waits on the capability used to
// hand the capability to a spare Task at once, as GHC does.  For a call
// that returns in nanoseconds that is two OS-thread hand-offs (wake the
// spare; then the caller, back, queues itself and waits to be given the
// capability back): two green threads making trivial safe calls on one
// capability took 16-289 ns per call over ten runs (the hand-offs land on
// idle or busy CPUs by chance), 1.6 us in another run.  Go's answer, which
// this is: release the capability without handing it over, and let a
// monitor retake it only from a call that is still running some time
// later (sysmon's retake, 20 us to 10 ms).  Here the call releases with a
// seq_cst exchange, counts itself in deferred_calls, and makes sure the ticker
// is watching (Ticker::watch_deferred_calls: one load when it already is;
// the hand-shake that keeps a release from going unwatched is next to it
// in runtime/ticker.cpp).  While watching, the ticker looks every
// kRetakePoll (50 us): a capability still free with work waiting and the
// same deferred_calls as one poll ago holds a call that has blocked for at
// least a poll, and the ticker grabs it and gives it to a spare.  So:
//  * a call that returns within a poll finds its capability free and goes
//    on: no hand-off, no system call;
//  * the work behind a blocking call waits 50-100 us for a spare (GHC and
//    the old code: a futex wake-up, 5-24 us), and at most one tick when
//    the ticker was not watching and its wake-up is slow;
//  * the waiting threads run when the caller's timeslice ends or it
//    blocks, as they would behind a plain function call: the return from
//    each call is a safe point (safe_call_leave), without which a thread
//    making back-to-back calls kept the capability for as long as it
//    called;
//  * another thread's arrival in the inbox during any call still hands the
//    capability over at once (notify_capability sees it free).
// The ticker stops watching after kQuietPolls polls without a deferred
// call; it also looks once every tick, so work could wait at most a tick
// even if a watch were missed (the hand-shake says none is).  A returning caller takes its capability back with the same CAS as
// ever (safe_call_leave), racing the ticker's grab: exactly one wins.
//
// Note [Unbound threads on a bound Task]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A bound Task runs unbound threads while its own thread is blocked (Note
// [Bound threads]).  But it must not lend its OS thread to an unbound
// thread's safe call: the call may block for as long as it likes, and the
// bound thread - which can run nowhere else - would wait for it (main
// stuck behind a forked thread's read()).  So an unbound thread that enters
// a safe call on a bound Task first moves to a spare Task of the same
// capability, at the front of the queue (one OS hand-off), and makes its
// call there; the bound Task waits for its own thread.  This also keeps the
// invariant that a Task inside a safe call is never given a capability for
// anything but its own returning thread.
#include <cerrno>

#include "capstan/foreign.hpp"
#include "capstan/spark.hpp"
#include "io/timeouts.hpp"
#include "runtime/runtime.hpp"
#include "schedule/raise.hpp"
#include "schedule/schedule.hpp"
#include "task/green_thread.hpp"
#include "task/handover.hpp"
#include "trace/trace.hpp"

namespace capstan::detail {

using namespace capstan::rts;

namespace {

[[gnu::noinline]] void return_slow(Task* task, Capability* cap, Thread* cur) {
  cur->cap = cap;
  cur->state = ThreadState::runnable;
  if (cur->bound_task == task) {
    // Bound: queue it as a token and wait to be given the capability.  Same
    // OS thread throughout, so errno can be kept across the wait here.
    int saved_errno = errno;
    cur->returning = true;
    cap->inbox.push(cur);
    cap->context_switch.fetch_or(kReturning, std::memory_order_relaxed);
    notify_capability(cap);
    if (!wait_for_capability(task)) {
      // The runtime stopped with us still queued: impossible, as shutdown
      // waits for threads in safe calls, and we count as one until given.
      std::abort();
    }
    task->given_thread = nullptr;
    task->in_safe_call.store(nullptr, std::memory_order_relaxed);
    Capability* c = task->cap;
    c->current = cur;
    cur->state = ThreadState::running;
    if (rt.tracing) [[unlikely]]
      trace_resume(c, cur);
    errno = saved_errno;
    return;
  }
  // Unbound: leave through our scheduler context, which queues us (and
  // clears in_safe_call after the push).
  task->post.send_migrant(cur, cap, true);
  switch_to_scheduler_capless(task, cur);
  // --- resumed by whichever Task holds the capability now ---
}

}  // namespace

void safe_call_enter(safe_call_frame& f) {
  Task* task = green_task();
  if (!task) [[unlikely]] task = require_green_thread("capstan::safe_call");  // throws
  Thread* cur = task->cap->current;
  if (rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] {
    check_killed(cur);  // a safe point: may switch and throw
    task = my_task();
  }
  if (task->bound_thread && task->bound_thread != cur) [[unlikely]] {
    move_off_bound_task(task, cur);  // See Note [Unbound threads on a bound Task]
    // Now on a worker's OS thread: start afresh, so that no thread-local
    // address computed above is reused (Note [TLS across a switch]).
    return safe_call_enter(f);
  }
  // A call may block for long: its timeouts need timers (Note [Timeouts]).
  if (cur->unarmed_timeouts != 0) [[unlikely]] arm_timeouts(cur);
  task->in_safe_call.store(cur, std::memory_order_relaxed);
  if (rt.tracing) [[unlikely]]
    trace_safe_call_enter(task->cap, task, cur);
  Capability* cap = drop_capability(task);
  f.task = task;
  f.thread = cur;
  f.cap = cap;
  if (has_work(cap)) [[unlikely]] {
    // Work waits: a spare runs it if the call blocks (Note [Deferred hand-off]).
    cap->deferred_calls.store(cap->deferred_calls.load(std::memory_order_relaxed) + 1,
                              std::memory_order_relaxed);
    cap->hold.exchange(Hold::free, std::memory_order_seq_cst);  // an RMW: Note [Sleeping capabilities]
    rt.ticker.watch_deferred_calls();
    return;
  }
  // Lazy release: Note [Lazy release].
  cap->hold.store(Hold::free, std::memory_order_release);
  if (cap->inbox.maybe_nonempty() && try_grab_capability(cap)) [[unlikely]] give_capability_to_spare(cap);
}

void safe_call_leave(safe_call_frame& f, bool f_threw) {
  Task* task = f.task;  // same OS thread: nothing switched
  Thread* cur = f.thread;
  Capability* cap = f.cap;
  Capability* now = cap;  // the capability we run on after the call; null: look it up
  if (try_grab_capability(cap)) [[likely]] {
    task->in_safe_call.store(nullptr, std::memory_order_relaxed);
    take_capability(task, cap);
    cap->current = cur;
    if (rt.tracing) [[unlikely]]
      trace_resume(cap, cur);
  } else {
    // May resume on another OS thread: touch no thread-local here after it
    // (errno included - see Note [TLS across a switch]); the switch itself
    // carries f's errno over in Thread::saved_errno.
    return_slow(task, cap, cur);
    now = nullptr;
  }
  if (!f_threw && rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]]
    check_killed(cur);  // Note [Shutdown]: a call returning during shutdown
  if (f_threw) return;
  // A safe point, as every runtime call is: a thread making back-to-back
  // short calls keeps its capability through them (Note [Deferred
  // hand-off]), and must still give it up when its timeslice has expired.
  // yield_point_slow also raises what was thrown to us; else an exception
  // thrown during the call is raised as it returns.
  if (!now) now = my_task()->cap;
  if (now->context_switch.load(std::memory_order_relaxed) != 0) [[unlikely]]
    yield_point_slow();
  else
    raise_pending(cur, false);
}

}  // namespace capstan::detail
