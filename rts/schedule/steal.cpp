// steal.cpp - idle capabilities take threads from a stalled capability.
//
// Note [Stealing from a stalled capability]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The problem.  Work moves between capabilities by pushing (Note [Pushing
// work]): a busy capability hands threads to idle ones at its scheduling
// points.  A thread that computes for a long time without reaching a safe
// point (no runtime call, no yield_point()) keeps its capability from
// reaching one, so the threads waiting behind it wait for the whole
// computation while other capabilities idle.  GHC has the same gap (its
// run queues are owner-private too); Go closes it because its run queues
// are stealable at every operation.
//
// Policy.  An idle capability watches the others.  A capability is
// *stalled* when it holds threads in its run queue and has made no
// progress - no scheduling decision (its sched_epoch, bumped by every
// pick) and no fork (its threads_created) - for kStallNs.  An idle
// capability that sees a stall takes half of the waiting threads (rounded
// up, oldest first, locked ones stay) and runs them; while it still sees
// the stall it steals again, so a queue of n drains in about log2(n)
// steals.  A busy capability that keeps making progress is never stolen
// from: its surplus moves by pushing, which knows when moving pays (tiny
// threads stay local).  kStallNs is 1 ms, not less: at 100 us and 500 us,
// threads001 at -N2 saw capability 0 make no progress that long a few
// times a run (its OS thread preempted, we think), and the steals that
// followed shipped tiny threads across cores and cost it 15-18 %.
//
// Who watches.  An idle capability looks every kLookGapNs of its spin
// (looks read lines the owners write on every operation, so not more
// often).  It keeps spinning, instead of sleeping after kSpinNs, while it
// judges a stall it has seen for kJudgeNs (StallLook::watching; a burst of
// forks or a slow pick never lasts that long), and while a busy capability
// has asked to be watched within the last 2 kJudgeNs (watch_requested).
// Two wake-ups bring a sleeping watcher back:
//  * the busy capability itself, when its run queue first turns long
//    (kPushThreshold) while a capability idles (wake_watcher, from
//    long_queue_wants_push): the thread it is about to run may be the one
//    that never comes back.  It records the request (so a spinning watcher
//    does not go to sleep just then) and wakes a sleeping one, if any -
//    even when another seems to spin, since with more capabilities than
//    CPUs a "spinning" one may not be on a CPU - at most once per
//    kWatchWakeGapNs: waking one per
//    long-queue episode cost threads001 at -N2 a futex wake-up every ~70 us.
//    A stall that begins within kWatchWakeGapNs of the previous wake-up,
//    once that watcher has gone back to sleep, is left to the ticker;
//  * the ticker, for those and for stalls that begin with a short queue: a
//    busy capability with waiting threads that made no scheduling decision
//    in a whole tick (StallTicker).  Within two ticks.
//
// The hand-shake.  The run queue stays owner-private in the sense that
// matters for speed: the owner's operations use no locked instruction and
// no fence.  A steal is rare (it needs a stall) and may be slow, so the
// cost goes to the thief: an asymmetric Dekker hand-shake, as in
// userspace RCU or folly's asymmetric barriers (and Note [Wait locks]):
//   owner, around each operation:       thief (RunQueue::steal_front):
//     busy = 1          (relaxed)         thief = 1 (CAS: one thief at a time)
//     compiler barrier                    membarrier(PRIVATE_EXPEDITED)
//     if thief (acquire): wait it out     wait for busy == 0 (acquire)
//     ... operation ...                   ... unlink threads ...
//     busy = 0          (release)         thief = 0 (release)
// membarrier makes every running thread of the process execute a full
// barrier before it returns (a thread not running passes one when it is
// switched back in).  Take the point P where the owner's OS thread
// executes it.  If P comes before the owner's `busy = 1`, the owner's later
// load of `thief` comes after a full barrier that follows the thief's CAS,
// so it sees 1 and the owner waits before touching the queue.  If P comes
// after `busy = 1`, the store is visible to the thief once membarrier
// returns, so the thief waits for the release store `busy = 0`.  Either
// way the two never edit the queue at once, and the release/acquire pairs
// (busy for the owner's edits, thief for the thief's) order the edits.
// The owner's waiting branch drops busy while it waits, so a thief that
// found busy = 1 is not kept waiting by an owner that is itself waiting.
// A thief gives up (and lets go) if busy stays 1 for a few thousand turns:
// the owner's OS thread was descheduled mid-operation.  Without membarrier
// (old kernels, some sandboxes) nobody steals, and the gap is GHC's again.
//
// Rejected: Chase-Lev or Go-style stealable ring buffers (a locked
// instruction on every owner pop: a few ns on each ping-pong hop, where
// the scheduler is already most of the cost); a run-queue lock (two locked
// instructions per operation); a signal to the stalled thread to hand its
// queue over (the hand-over would run inside arbitrary user code, and
// ThreadSanitizer defers signals to the next intercepted call, which a
// pure computation never makes); and the ticker stealing directly (the
// ticker would need a run queue of its own to put the threads in).
//
// Note [Requeued while still running]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A yielding thread is pushed into its run queue *before* the switch away
// from it saves its context (yield_current, a returning safe call's
// requeue, the shutdown checkpoint).  With only the owner taking threads
// from the queue that was harmless: nobody could run it before the owner
// itself switched.  A thief can: if the owner's OS thread is preempted
// between the push and the switch for longer than kStallNs - a loaded
// machine does that - the capability looks stalled, and a thief that took
// the thread would run it on a second OS thread, on a stack still in use
// (the stress suite crashed this way).  So requeue_running (switch.hpp)
// raises Thread::leaving before the push, and the landing side of the
// switch releases it (after_switch's unlock, the same post-switch release
// by which a blocked thread becomes wakeable); steal_front skips a thread
// whose flag is up and reads it with acquire, so the saved context is
// visible to the thief that runs the thread.  The owner's own push_work
// skips it too: the owner may pick between the requeue and the switch,
// and a thread let in ahead of the yielding one (back from a safe call)
// left it in the half of the queue a push hands over (SIGSEGV in
// capstan_switch under load at -N4, PushWork.AThreadStillOnItsStackIsNeverPushed).
// Threads pushed by anyone else (new ones, woken ones) are already off
// every stack.
#include "schedule/steal.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "primitives/clock.hpp"
#include "runtime/runtime.hpp"
#include "sparks/pool.hpp"

namespace capstan::rts {

namespace {

// How long a capability with waiting threads may go without progress
// before idle ones take them (see the Note for why not less).
constexpr std::int64_t kStallNs = 1'000'000;
// How long a capability must be seen making no progress before a stall is
// worth judging (StallLook::watching): longer than a slow pick or a
// descheduled moment, shorter than an idle spin (kSpinNs in idle.cpp).
constexpr std::int64_t kJudgeNs = 25'000;

// The least time between two watcher wake-ups by busy capabilities.
constexpr std::int64_t kWatchWakeGapNs = 1'000'000;

void heavy_barrier() { syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0); }

// candidate: a capability that may be stalled (is running, has threads
// waiting).  Relaxed hints: a wrong answer costs one useless look, or one
// steal attempt that finds nothing.
bool candidate(const Capability* v) {
  return v->run_queue.size_hint() != 0 && !v->idle.load(std::memory_order_relaxed) &&
         v->hold.load(std::memory_order_relaxed) == Hold::held;
}

bool stealing_possible() { return rt.membarrier_ok && rt.n_caps > 1; }

}  // namespace

bool watch_requested(std::int64_t now) {
  return now - rt.watch_request_ns.load(std::memory_order_relaxed) < kJudgeNs * 2;
}

StallLook look_for_stalls(Capability* cap) {
  if (!stealing_possible()) return StallLook::nothing;
  if (cap->stall_watch.size() != rt.n_caps) cap->stall_watch.resize(rt.n_caps);
  std::int64_t now = now_ns();
  StallLook result = StallLook::nothing;
  for (unsigned i = 1; i < rt.n_caps; ++i) {
    Capability* v = rt.caps[(cap->no + i) % rt.n_caps];
    StallWatch& w = cap->stall_watch[v->no];
    if (!candidate(v)) {
      w.since_ns = 0;
      continue;
    }
    // Progress is a scheduling decision or a fork: a thread forking a
    // burst makes no decision until back-pressure stops it, and stealing
    // the burst's threads from under it only ships tiny threads across
    // cores.
    std::uint64_t e = v->sched_epoch.load(std::memory_order_relaxed);
    std::uint64_t c = v->threads_created.get();
    if (w.since_ns == 0 || e != w.epoch || c != w.created) {  // first look, or progress
      w.epoch = e;
      w.created = c;
      w.since_ns = now;
      continue;
    }
    if (now - w.since_ns < kStallNs) {
      // Only a stall seen for kJudgeNs keeps an idle capability spinning: a
      // watcher kept spinning through every short gap between two picks
      // cost threads001 at -N2 a tenth of its speed.
      if (now - w.since_ns >= kJudgeNs) result = StallLook::watching;
      continue;
    }
    std::size_t n = 0;
    Thread* t = v->run_queue.steal_front(&heavy_barrier, &n);
    if (!t) {
      // Nothing movable (locked or still-leaving threads), another thief,
      // or an owner descheduled mid-operation: judge afresh rather than
      // pay a membarrier at every look.
      w.since_ns = now;
      continue;
    }
    for (Thread* x = t; x; x = x->link) x->cap = cap;
    cap->run_queue.push_arrivals(t);  // one hand-shake on our own queue, not n
    cap->threads_stolen.add(n);
    return StallLook::stole;
  }
  return result;
}

void wake_watcher(std::int64_t now) noexcept {
  if (!stealing_possible()) return;
  rt.watch_request_ns.store(now, std::memory_order_relaxed);  // a spinner about to sleep looks
  // At most one wake-up per kWatchWakeGapNs (see the Note).
  if (now - rt.last_watch_wake_ns.load(std::memory_order_relaxed) < kWatchWakeGapNs) return;
  // A capability
  // that looks as if it spins does not stop us: with more capabilities
  // than CPUs its OS thread may be off the CPU for the whole judgement (at
  // -N8 on two cores `hog`'s 200 threads waited 1.2-21 ms for the ticker,
  // against 1.2 ms every time once a sleeper was woken regardless); and
  // with no capability asleep, wake_one_sleeper wakes nobody.
  rt.last_watch_wake_ns.store(now, std::memory_order_relaxed);
  wake_one_sleeper();  // to look around (idle.cpp), free CPU or not: threads wait
}

void StallTicker::tick() {
  if (!stealing_possible()) return;
  if (epochs_.size() != rt.n_caps) epochs_.assign(rt.n_caps, 0);
  bool stalled = false;
  for (Capability* c : rt.caps) {
    std::uint64_t e = c->sched_epoch.load(std::memory_order_relaxed);
    if (e == epochs_[c->no] && candidate(c)) stalled = true;
    epochs_[c->no] = e;
  }
  if (stalled && rt.n_idle(std::memory_order_relaxed) != 0) wake_one_sleeper();
}

}  // namespace capstan::rts
