// biased_spinlock.hpp - a SpinLock that the one capability's holder takes
// without a locked instruction.
//
// Used for each capability's list of the threads it is home to (Note
// [Home lists]): every thread is linked when forked and unlinked when it
// finishes, so with one capability nearly every lock of it is taken by the
// capability's holder, and an exchange costs a locked instruction each
// time (two per thread; about 5 ns apiece on some hosts, against a 50 ns
// thread).  The lock is biased to that holder as mvar locks are (Note
// [Biased locks] in capstan/detail/mvar_core.hpp), but reversibly: the
// lists' other users - the thread dump, the hog warning, an in-call still
// waiting for a capability - come now and then, and must not turn the
// owner's path into the exchange for the rest of the run.
#pragma once

#include <atomic>

#include "capstan/detail/mvar_core.hpp"
#include "primitives/spinlock.hpp"

namespace capstan::rts {

// Note [Biased spin locks]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// In a run with biased locks (one capability, membarrier, no
// ThreadSanitizer: Runtime::bias_locks) the lock has an *owner*, the OS
// thread holding the capability (detail::tl_here.bias_owner, or a caller that
// says it holds it), and *visitors*, everyone else.  The owner's side is
// the owner's side of Note [Biased locks]; a visitor's replaces the
// revocation by a count, so that the bias comes back when it leaves:
//   owner:   owner_in_ = 1 (relaxed, then a compiler barrier); if
//            visitors_ reads 0 (acquire) the lock is held; else
//            owner_in_ = 0 and take locked_ with an exchange, as anyone.
//   visitor: 1. visitors_ += 1 (seq_cst);
//            2. membarrier(PRIVATE_EXPEDITED);
//            3. wait while owner_in_ is 1 (acquire);
//            4. take locked_ with an exchange; counted_ = true.
//   unlock:  a counted visitor: locked_ = 0, then visitors_ -= 1 (both
//            release); anyone else: 0 to the one word held (release):
//            owner_in_ if it reads 1, else locked_.
// Mutual exclusion between the owner and a visitor is Note [Biased
// locks]' argument: an owner whose load of visitors_ follows the barrier
// step 2 runs on its CPU reads the count and backs off; one whose load
// precedes it had its owner_in_ = 1 drained by it, so step 3 waits for the
// section's end.  Between visitors, and between a visitor and an owner
// that backed off, locked_ decides.  The owner's next biased section
// follows a visitor's last through visitors_ (its release decrement, the
// owner's acquire load).  unlock stores to one word only, as the mvar's
// does: storing 0 to both, owner_in_ first, would let a visitor at step 3
// that saw owner_in_ = 0 take locked_ before the second store freed it.
// Only the owner reads owner_in_ as 1 in unlock: a counted visitor leaves
// through unlock_visitor, and in a run without bias nobody sets it.
// counted_ is written and read only by holders.
// A visitor pays a membarrier (about 0.2 us, more where the other CPUs are
// busy) once per section.  In a run without bias nobody is an owner and
// the lock is a SpinLock.  Checked by models/biased_spinlock.pml
// (docs/models.md).
class BiasedSpinLock {
 public:
  // bias: whether this lock has an owner (Runtime::bias_locks of the run
  // that made it).  Call before anyone else uses the lock.
  void bias(bool on) noexcept { biased_ = on; }

  // lock takes the lock as its owner if the calling OS thread holds the
  // run's one capability, else as a visitor.
  void lock() noexcept { lock(detail::bias_owner_here()); }
  // lock(holder) is lock() for a caller that says whether it holds the
  // capability (an in-call that has claimed one but not yet taken it, and
  // the runtime's own code, where the thread-local read is a call); the
  // holder is the owner if the lock is biased.
  void lock(bool holder) noexcept {
    if (holder && biased_) [[likely]] {
      owner_in_.store(true, std::memory_order_relaxed);
      // Only a compiler barrier: a visitor's membarrier makes it a full one.
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (visitors_.load(std::memory_order_acquire) == 0) [[likely]] return;
      owner_in_.store(false, std::memory_order_release);  // backing off
      spin_lock(locked_);
      return;
    }
    if (!biased_) [[likely]] {
      spin_lock(locked_);
      return;
    }
    lock_visitor();
  }
  void unlock() noexcept {
    if (counted_) [[unlikely]] {
      unlock_visitor();
      return;
    }
    // Only the word held: see Note [Biased spin locks].
    (owner_in_.load(std::memory_order_relaxed) ? owner_in_ : locked_)
        .store(false, std::memory_order_release);
  }

  // For tests: whether the shared word is held (an owner inside through
  // owner_in_ leaves it free), and how many visitors are counted in.
  bool word_held() const noexcept { return locked_.load(std::memory_order_relaxed); }
  unsigned visitors() const noexcept { return visitors_.load(std::memory_order_relaxed); }

 private:
  // lock_visitor: steps 1-4 of Note [Biased spin locks]; out of line.
  void lock_visitor() noexcept;
  void unlock_visitor() noexcept;

  std::atomic<bool> locked_{false};        // the shared lock word
  std::atomic<bool> owner_in_{false};      // set only by the owner
  bool biased_ = false;                    // [start] written by bias()
  bool counted_ = false;                   // [lock] the holder is a counted visitor
  std::atomic<unsigned> visitors_{0};      // visitors in steps 1-4 or holding the lock
};

}  // namespace capstan::rts
