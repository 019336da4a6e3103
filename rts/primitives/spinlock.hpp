// spinlock.hpp - a test-and-test-and-set lock for very short critical sections.
//
// Used where the holder never blocks and never switches green threads while
// holding it (per-capability thread lists, a thread's wait lock).  Waiting
// spins, then yields the OS thread (spin.hpp).
#pragma once

#include <atomic>

#include "primitives/spin.hpp"

namespace capstan::rts {

// spin_lock takes a lock word: test-and-test-and-set, spinning then
// yielding the OS thread (SpinWait).  acquire: the critical section's reads
// see the previous holder's writes (the holder unlocks with a release store).
inline void spin_lock(std::atomic<bool>& locked) noexcept {
  while (locked.exchange(true, std::memory_order_acquire)) {
    for (SpinWait w; locked.load(std::memory_order_relaxed);) w.turn();
  }
}

class SpinLock {
 public:
  void lock() noexcept { spin_lock(locked_); }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  // release: publishes the critical section's writes to the next holder.
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace capstan::rts
