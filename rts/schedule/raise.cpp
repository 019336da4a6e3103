// raise.cpp - asynchronous exceptions, the scheduler's half (GHC's
// RaiseAsync.c): posting, raising, and the wait locks that make a blocked
// thread findable.
//
// Note [Raising asynchronously]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An exception thrown to thread T (throw_to, kill_thread, a timeout, see
// exception/ and io/timeouts.cpp) travels as a ThrowMsg.  post_throw,
// holding T's wait_lock, finds T in one of three states:
//  * finished (live_id is not the id the thrower holds): nothing to do;
//  * blocked in an mvar wait (blocked_on set) and not masked
//    uninterruptibly (GHC: a blocked thread in an interruptible operation
//    is interruptible even when masked): the thrower takes T's waiter off
//    the mvar's queue (trying the mvar lock, as Note [Killing a blocked
//    thread] does), sets its outcome to `interrupted`, hands T the
//    exception (Thread::raised) and wakes it.  T's park() rethrows it (a
//    kill_thread's thread_killed is the exception: the outcome is then
//    `kill_raised` and T throws a fresh thread_killed instead).  As
//    with every wake-up, exactly one party dequeues the waiter, so the
//    thread leaves the queue exactly once and a racing put either served it
//    first (then the exception waits on the pending list below, and T keeps
//    the value) or finds it gone (and serves the next waiter);
//  * anything else (running, runnable, masked, not started, blocked in a
//    way that is not interruptible): the message goes on T's pending list,
//    async_pending is set, and every capability is interrupted.  T raises it
//    at its next safe point if unmasked, at its next blocking call if masked
//    interruptibly, or at unmask; or T finishes, and the thrower is told.
//
// Why the interrupt reaches T wherever it is.  The thrower's fetch_or on a
// capability's context_switch word is a release that follows its write of
// async_pending; nobody clears the word except with an RMW that reads it
// (acquire) - the owner's exchange at a safe point, or yield's exchange
// when it found the word set.  So on each capability either the word is
// still set, and the thread running there next passes a safe point that
// checks its own pending list, or an acquire read of the word has already
// consumed it, and every later switch on that capability (switch_to checks
// the incoming thread's async_pending and re-sets the word) sees the flag.
// No fence on the switch path is needed for that: the happens-before
// runs through the word.
//
// Why a blocked T cannot miss a message.  A blocker decides to park under
// wait_lock: it checks async_pending and publishes blocked_on in the same
// critical section (publish_wait, called by mvar_core::park_wait).  A
// thrower holding the same lock sees either blocked_on (and interrupts the
// wait) or not yet (and T, taking the lock after it, sees the pending
// message and raises instead of parking).
// Checked by models/mvar_block.pml (docs/models.md).
//
// Raising never happens while T is unwinding (a throw from a destructor
// during unwinding would terminate()); the message waits for the next
// point at which T is not unwinding.
#include "schedule/raise.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <exception>
#include <vector>

#include "capstan/async_exception.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/thread.hpp"
#include "capstan/errors.hpp"
#include "primitives/clock.hpp"
#include "primitives/spin.hpp"
#include "runtime/runtime.hpp"
#include "schedule/raise_killed.hpp"
#include "schedule/schedule.hpp"

namespace capstan::rts {

namespace {

void unlink(Thread* t, ThrowMsg* m) noexcept {
  if (m->prev) m->prev->next = m->next; else t->pending_head = m->next;
  if (m->next) m->next->prev = m->prev; else t->pending_tail = m->prev;
  m->next = m->prev = nullptr;
  m->queued = false;
  if (!t->pending_head) t->async_pending.store(false, std::memory_order_relaxed);
}

void append(Thread* t, ThrowMsg* m) noexcept {
  m->next = nullptr;
  m->prev = t->pending_tail;
  if (t->pending_tail) t->pending_tail->next = m; else t->pending_head = m;
  t->pending_tail = m;
  m->queued = true;
  t->async_pending.store(true, std::memory_order_relaxed);
}

// interrupt_all: see the Note (why the interrupt reaches T).
void interrupt_all() noexcept {
  for (Capability* c : rt.caps) c->context_switch.fetch_or(kInterrupt, std::memory_order_release);
}

// not_raised: t's wait cannot take m now (t holds its wait_lock, which
// this releases).  Queue m for t's next safe point, or - deadlock
// detection, ignore_mask - leave t alone.
Posted not_raised(Thread* t, ThrowMsg* m, bool ignore_mask) noexcept {
  if (ignore_mask) {
    t->wait_lock.unlock();
    return Posted::gone;
  }
  append(t, m);
  t->wait_lock.unlock();
  interrupt_all();
  return Posted::queued;
}

// maybe_interruptible: interruptible_wait without the unwinding test, which
// needs the mvar's lock (see post_throw); the caller holds t's wait_lock.
bool maybe_interruptible(const Thread* t, bool ignore_mask) noexcept {
  return t->blocked_on && (ignore_mask || t->mask != Mask::uninterruptible) &&
         !t->waiter->shielded;
}
}  // namespace

bool interruptible_wait(const Thread* t, bool ignore_mask, unsigned in_flight) noexcept {
  // A waiter that blocked while unwinding is left alone: raising there
  // would terminate() (its uncaught count was saved when it switched out),
  // unless the message's own catch is inside the unwinding (`in_flight`:
  // Note [Timeouts begun while unwinding] in io/timeouts.cpp).  A shielded
  // wait (mvar_core::park_shielded) is never interrupted.
  unsigned uncaught = t->has_eh ? t->eh.uncaught : 0;
  return maybe_interruptible(t, ignore_mask) && uncaught == in_flight;
}

Posted post_throw(Thread* t, std::uint64_t id, ThrowMsg* m, bool ignore_mask,
                  detail::wake_list* defer) noexcept {
  for (SpinWait spin;; spin.turn()) {
    t->wait_lock.lock();
    // Main whose function has returned counts as finished: Note [Main at
    // shutdown] (shutdown/shutdown.cpp; seq_cst, against its store there).
    if (t->live_id.load(std::memory_order_relaxed) != id ||
        (t->is_main && rt.shutting_down.load(std::memory_order_seq_cst))) {
      t->wait_lock.unlock();
      return Posted::gone;
    }
    if (maybe_interruptible(t, ignore_mask)) {
      detail::mvar_core* mv = t->blocked_on;
      if (!mv->try_lock()) {  // the order elsewhere is mvar lock -> wait_lock
        t->wait_lock.unlock();
        continue;  // back off and retry: the holder is a few instructions from unlocking
      }
      // Whether T blocked while unwinding is asked only now, holding the
      // mvar's lock: T saves its exception state (has_eh, eh.uncaught)
      // only as it switches out, and the landing side releases the lock
      // after that (the acquire of our try_lock pairs with it).  Asked
      // under the wait_lock alone, it could see T on its way to the switch
      // as not unwinding, and a throw then landed in a destructor's lock:
      // std::terminate (UnwindingStress.* in tests/stress/kill_stress.cpp;
      // ThreadSanitizer saw the read race the switch's write).  Shutdown's
      // kill asks only under the lock too (request_kill).
      if (!interruptible_wait(t, ignore_mask, m->in_flight)) {
        mv->unlock();
        return not_raised(t, m, ignore_mask);
      }
      detail::waiter* w = t->waiter;
      detail::wake_list own;
      detail::wake_list& woken = defer ? *defer : own;
      detail::leave_queue(*mv, *w, woken);  // Note [Leaving the shared_mutex queue]
      t->blocked_on = nullptr;
      t->waiter = nullptr;
      if (m->ex == detail::thread_killed_ptr()) {
        // A kill: T throws a fresh thread_killed after its wait (from
        // mvar_core::raise_outcome), not a rethrow of the one shared
        // exception object (whose count every rethrow would bump, from
        // every core), and one frame nearer its handler (Note [Where a
        // kill is caught] in schedule/fork.cpp).
        w->outcome = detail::waiter::kill_raised;
      } else {
        w->outcome = detail::waiter::interrupted;
        t->raised = m->ex;
      }
      t->wait_lock.unlock();
      mv->unlock();  // before waking: T may destroy the mvar as it unwinds
      m->outcome = ThrowMsg::raised;
      woken.add(t);
      own.wake_all();  // empty if the caller wakes them (defer)
      return Posted::raised;
    }
    return not_raised(t, m, ignore_mask);
  }
}

bool retract_throw(Thread* t, ThrowMsg* m) noexcept {
  t->wait_lock.lock();
  bool was_queued = m->queued;
  if (was_queued) unlink(t, m);
  t->wait_lock.unlock();
  return was_queued;
}

ThrowMsg* pop_raisable(Thread* cur, bool blocking) noexcept {
  if (cur->mask == Mask::uninterruptible) return nullptr;
  if (cur->mask == Mask::interruptible && !blocking) return nullptr;
  ThrowMsg* m = cur->pending_head;
  // See the Note: never while unwinding, but for a timeout begun in the
  // unwinding (Note [Timeouts begun while unwinding] in io/timeouts.cpp).
  if (!m || std::uncaught_exceptions() != static_cast<int>(m->in_flight)) return nullptr;
  unlink(cur, m);
  return m;
}

void raise_pending_slow(Thread* cur, bool blocking) {
  cur->wait_lock.lock();
  ThrowMsg* m = pop_raisable(cur, blocking);
  cur->wait_lock.unlock();
  if (m) raise_msg(m);
}

void count_raised() noexcept { my_task()->cap->async_raised.add(); }

void raise_msg(ThrowMsg* m) {
  std::exception_ptr ex = m->ex;  // m may be gone once on_done returns
  m->outcome = ThrowMsg::raised;
  if (m->on_done) m->on_done(m);
  if (ex == detail::thread_killed_ptr()) {  // as kill_raised does
    raise_killed(true);
    __builtin_unreachable();
  }
  count_raised();
  std::rethrow_exception(std::move(ex));
}

void raise_interrupted(Thread* cur) {
  std::exception_ptr ex = std::move(cur->raised);
  cur->raised = nullptr;
  count_raised();
  std::rethrow_exception(std::move(ex));
}

void finish_pending(Thread* self, Capability* cap) noexcept {
  if (begin_unlocked_wait_write(cap)) {
    // Nobody has posted in this run (posting turns wait locks on first).
    self->live_id.store(0, std::memory_order_relaxed);
    end_unlocked_wait_write(cap);
    return;
  }
  settle_pending(self, /*finished=*/true);
}

void settle_pending(Thread* self, bool finished) noexcept {
  self->wait_lock.lock();
  if (finished) self->live_id.store(0, std::memory_order_relaxed);
  ThrowMsg* list = self->pending_head;
  self->pending_head = self->pending_tail = nullptr;
  self->async_pending.store(false, std::memory_order_relaxed);
  for (ThrowMsg* m = list; m; m = m->next) m->queued = false;
  self->wait_lock.unlock();
  while (list) {
    ThrowMsg* next = list->next;  // read first: on_done may free it
    list->outcome = ThrowMsg::target_finished;
    if (list->on_done) list->on_done(list);
    list = next;
  }
}

// expire_due_timeouts: at a timeslice boundary, a running thread's
// timeouts whose deadline has passed and that have no timer post their
// exception to the thread itself (Note [Timeouts] in io/timeouts.cpp).
void expire_due_timeouts(Thread* cur) {
  std::int64_t now = now_ns();
  for (TimeoutFrame* f = cur->timeouts; f; f = f->outer) {
    if (f->armed || f->fired || f->deadline_ns > now) continue;
    f->fired = true;  // unarmed: only its owner (we) touches it
    f->msg.ex = std::make_exception_ptr(timeout_expired{f->thread, f->token});
    post_throw(cur, cur->id, &f->msg);  // queued: we are running
  }
}

// Note [Wait locks]
// ~~~~~~~~~~~~~~~~~
// Thread::wait_lock guards blocked_on/waiter, the pending list and live_id
// once anyone may look at another thread's wait: a thrower, a timeout's
// timer, the shutdown killer.  Before that, an mvar hand-off would pay two
// locked instructions for nobody, so blockers and wakers skip the lock while
// rt.waits_need_lock is false.  Turning it on is an asymmetric fence (as in
// userspace RCU or folly's asymmetricHeavyBarrier).  Each unlocked write is
// bracketed by its capability's unlocked_wait_write (raise.hpp):
//   writer, holding c: c->unlocked_wait_write = 1 (relaxed, then a
//           compiler barrier); if waits_need_lock: store 0 (release), take
//           the lock; else write the fields, then store 0 (release)
//   enabler:
//   1. waits_need_lock = true (seq_cst);
//   2. membarrier(PRIVATE_EXPEDITED): every running thread of the process
//      executes a full barrier;
//   3. for every other capability, wait while unlocked_wait_write is 1
//      (acquire).
// A writer whose load of the flag follows its CPU's barrier of step 2
// reads true (stored before it) and takes the lock.  One whose load
// precedes that barrier had its store of 1 drained by it (on x86 a store
// may wait in the store buffer past a later load; the barrier ends that),
// so step 3 reads that 1 - then waits - or a 0 stored after the writes:
// the write's own end or a later bracket's, every 0 a release store, so
// the writes happen-before all the enabler does next.  A
// writer's OS thread not on a CPU at step 2 was switched out by the
// kernel, a full barrier too.  The wait lasts a few instructions.
// Once the locks are on, a writer still stores the marker twice before
// it takes the lock.  A relaxed look at the flag first would spare that,
// but cost the unlocked path (every run that never throws) 4-5 %:
// threads003 20000 -N1, interleaved, 34.99 -> 36.54 and 34.33 -> 36.15
// ns per hop (medians of 7 and 9).  Not kept.
// Step 3 used to wait, instead, until every other busy capability had
// made a scheduling decision: a proxy for "no unlocked write in progress"
// that a thread computing without a safe point held up for as long as it
// computed, so the run's first throw_to, kill_thread, state_of or timeout
// waited behind any hog (WaitLocks.TheFirstThrowDoesNotWaitForAHog).  The
// markers cost the hand-off two plain stores per block and per wake (a
// mov each on x86) to a line the holder writes anyway (sched_epoch).
// Concurrent callers each run the steps (they are idempotent) and each
// returns only after its own step 3, so nobody proceeds early; wait_locks_on
// lets later callers skip all of it.  OS threads that hold no capability
// (try_put from a plain thread, a thread inside safe_call) always take the
// lock; so does everyone if membarrier is unavailable.  Once on, the lock
// stays on for the run.
void enable_wait_locks() {
  if (rt.wait_locks_on.load(std::memory_order_acquire)) [[likely]] return;
  rt.waits_need_lock.store(true, std::memory_order_seq_cst);
  if (rt.membarrier_ok) {
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    Task* me = my_task();
    Capability* mine = me ? me->cap : nullptr;
    for (Capability* c : rt.caps) {
      if (c == mine) continue;  // we are not inside a write
      SpinWait wait;
      while (c->unlocked_wait_write.load(std::memory_order_acquire) != 0) wait.turn();
    }
  }
  rt.wait_locks_on.store(true, std::memory_order_release);
}

}  // namespace capstan::rts
