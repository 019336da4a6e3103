// raise.hpp - asynchronous exceptions, the scheduler's half (GHC's
// RaiseAsync.c): posting an exception to a thread, and raising it in the
// thread at a safe point or a blocking call.  Waiting for delivery
// (throw_to), masks and timeouts are built on these in exception/ and io/.
// See Note [Raising asynchronously] in schedule/raise.cpp.
#pragma once

#include <atomic>
#include <cstdint>

#include "capability/capability.hpp"
#include "capstan/detail/bridge.hpp"
#include "runtime/runtime.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

// raise_pending_slow raises the oldest exception thrown to `cur` (the
// running thread) if its mask allows it here: at a safe point only when
// unmasked; at a blocking call (`blocking`) also when masked
// interruptibly.  Never while `cur` is unwinding.  Returns if nothing was
// raised.
void raise_pending_slow(Thread* cur, bool blocking);

// raise_pending: the inline check in front of raise_pending_slow.
inline void raise_pending(Thread* cur, bool blocking) {
  if (cur->async_pending.load(std::memory_order_relaxed)) [[unlikely]]
    raise_pending_slow(cur, blocking);
}

// pop_raisable takes the message `cur` may raise here (as
// raise_pending_slow decides) off its pending list; cur->wait_lock held.
ThrowMsg* pop_raisable(Thread* cur, bool blocking) noexcept;
// raise_msg tells m's thrower and raises m's exception in the caller.
[[noreturn]] void raise_msg(ThrowMsg* m);

// raise_interrupted rethrows the exception that interrupted cur's wait
// (waiter::interrupted; Thread::raised), counting it.
[[noreturn]] void raise_interrupted(Thread* cur);
// count_raised counts one asynchronous exception raised on this capability.
void count_raised() noexcept;

enum class Posted : std::uint8_t {
  gone,    // the thread has finished (or never existed in this run): nothing done
  raised,  // it was blocked interruptibly: its wait ended with m->ex, m is done
  queued,  // m waits on its pending list; m->on_done will be called
};

// interruptible_wait: may an exception be raised in t's wait now (t is
// blocked; the caller holds t's wait_lock)?  Not if t blocked while
// unwinding (raising would terminate()), in a shielded wait, or - unless
// ignore_mask - under uninterruptible_mask.  Throwers and shutdown's kill
// (Note [Killing a blocked thread] in shutdown/shutdown.cpp) ask it.
// `in_flight`: the exceptions the message may find in flight in t (Note
// [Timeouts begun while unwinding] in io/timeouts.cpp; 0 for all others).
bool interruptible_wait(const Thread* t, bool ignore_mask, unsigned in_flight = 0) noexcept;

// post_throw throws m->ex to the thread t that had id `id`.  Wait locks
// must be on (enable_wait_locks).  Never blocks for long: callable from
// the IO thread.
// With ignore_mask (deadlock detection), a blocked thread is interrupted
// whatever its mask, and one that is not blocked is left alone (Posted::gone).
// With `defer`, the threads it would wake (t, and waiters a shared_mutex
// re-grant serves) are added to *defer for the caller to wake.
Posted post_throw(Thread* t, std::uint64_t id, ThrowMsg* m, bool ignore_mask = false,
                  detail::wake_list* defer = nullptr) noexcept;

// expire_due_timeouts posts to `cur` (running) the time-outs of its
// unarmed timeout frames whose deadline has passed.
void expire_due_timeouts(Thread* cur);

// retract_throw takes a queued m back off t's pending list; false if the
// target already took it (its on_done is then being called).
bool retract_throw(Thread* t, ThrowMsg* m) noexcept;

// finish_pending, when `self` finishes on `cap` (held): it is no longer a
// target, and every thrower still waiting is told so (target_finished).
void finish_pending(Thread* self, Capability* cap) noexcept;
// settle_pending ends every throw queued on self as if self had finished
// (the throwers return), and if `finished` marks self finished for new
// ones; finish_pending is it for a thread that ends.
void settle_pending(Thread* self, bool finished) noexcept;

// begin_unlocked_wait_write: the holder of `cap` is about to write a wait
// field (blocked_on, waiter, live_id) of some thread - its own, or one it
// serves.  True: wait locks are off, write without Thread::wait_lock, then
// call end_unlocked_wait_write; false: take the lock.  Note [Wait locks].
inline bool begin_unlocked_wait_write(Capability* cap) noexcept {
  cap->unlocked_wait_write.store(1, std::memory_order_relaxed);
  // A compiler barrier only: the store above must not sink below the load
  // of the flag.  The CPU's side of the ordering (x86 lets a store wait
  // in its buffer past a later load) is enable_wait_locks' membarrier.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (!rt.waits_need_lock.load(std::memory_order_relaxed)) [[likely]] return true;
  // Release, as end_unlocked_wait_write: an enabler whose acquire reads
  // this 0 must also see an earlier unlocked write's fields (a relaxed
  // store would not continue that write's release sequence).
  cap->unlocked_wait_write.store(0, std::memory_order_release);
  return false;
}
// end_unlocked_wait_write: the unlocked writes are done; the release
// hands them to an enable_wait_locks that waits for this store.
inline void end_unlocked_wait_write(Capability* cap) noexcept {
  cap->unlocked_wait_write.store(0, std::memory_order_release);
}

// enable_wait_locks turns on Thread::wait_lock for every blocker and waker
// and returns once nobody can still be skipping it (Note [Wait locks]).
// Idempotent; cheap once done.  Call on a green thread.
void enable_wait_locks();

}  // namespace capstan::rts
