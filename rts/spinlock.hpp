// spinlock.hpp - a test-and-test-and-set lock for very short critical sections.
//
// Used where the holder never blocks and never switches green threads while
// holding it (per-capability thread lists, a thread's wait lock).  After a
// short spin it yields the OS thread, so a descheduled holder cannot make the
// waiter burn its whole timeslice.
#pragma once

#include <sched.h>

#include <atomic>

namespace capstan::rts {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// spin_lock takes a lock word: test-and-test-and-set, yielding the OS
// thread after a short spin.  acquire: the critical section's reads see the
// previous holder's writes (the holder unlocks with a release store).
inline void spin_lock(std::atomic<bool>& locked) noexcept {
  while (locked.exchange(true, std::memory_order_acquire)) {
    for (int spins = 0; locked.load(std::memory_order_relaxed); ++spins) {
      if (spins < 128) cpu_relax(); else sched_yield();
    }
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
