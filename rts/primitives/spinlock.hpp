// spinlock.hpp - a test-and-test-and-set lock for very short critical sections.
//
// Used where the holder never blocks and never switches green threads while
// holding it (per-capability thread lists, a thread's wait lock).  Waiting
// spins, then yields the OS thread (spin.hpp).
#pragma once

#include <atomic>

#include "primitives/spin.hpp"

namespace capstan::rts {

class SpinLock {
 public:
  void lock() noexcept {
    // acquire: the critical section's reads see the previous holder's writes.
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (SpinWait w; locked_.load(std::memory_order_relaxed);) w.turn();
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  // release: publishes the critical section's writes to the next holder.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace capstan::rts
