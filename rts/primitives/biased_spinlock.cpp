// biased_spinlock.cpp - the visitors' side of Note [Biased spin locks].
#include "primitives/biased_spinlock.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace capstan::rts {

void BiasedSpinLock::lock_visitor() noexcept {
  // Step 1, seq_cst: ordered before the barrier of step 2 on every CPU.
  visitors_.fetch_add(1, std::memory_order_seq_cst);
  // Step 2.  A biased lock exists only in a run that registered the
  // process for membarrier, so the call cannot fail.
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  // Step 3: acquire, so an owner's section that ends here happens-before ours.
  for (SpinWait spin; owner_in_.load(std::memory_order_acquire); spin.turn()) {
  }
  spin_lock(locked_);  // step 4
  counted_ = true;
}

void BiasedSpinLock::unlock_visitor() noexcept {
  counted_ = false;
  locked_.store(false, std::memory_order_release);
  // release: the owner's next biased section, which begins with an
  // acquire load reading the count this leaves, sees our section's writes.
  visitors_.fetch_sub(1, std::memory_order_release);
}

}  // namespace capstan::rts
