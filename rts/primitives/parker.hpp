// parker.hpp - put one OS thread to sleep until another wakes it (futex).
//
// Note [Sticky wake-up]
// ~~~~~~~~~~~~~~~~~~~~~
// A wake-up that arrives before the sleeper has gone to sleep must not be
// lost (GHC's task->wakeup flag serves the same purpose).  The state word is
// a sticky flag: unpark() sets it to 1 and only then issues FUTEX_WAKE;
// park() consumes it with an exchange and sleeps only while it reads 0, and
// FUTEX_WAIT itself re-checks the word atomically against 0 before
// sleeping.  So an unpark either finds the sleeper already waiting (and
// wakes it) or leaves the 1 that its next park() consumes without sleeping.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace capstan::rts {

inline long futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       const struct timespec* timeout = nullptr) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE,
                 expected, timeout, nullptr, 0);
}

inline long futex_wake(std::atomic<std::uint32_t>* word, int n) {
  return syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, n,
                 nullptr, nullptr, 0);
}

class Parker {
 public:
  // park sleeps until unpark() has been called since the last park().
  void park() noexcept {
    // acquire: whatever the unparker wrote before unpark() is visible.
    while (state_.exchange(0, std::memory_order_acquire) == 0) futex_wait(&state_, 0);
  }
  // unpark wakes the parked thread, or makes its next park() return at once.
  void unpark() noexcept {
    // release: publishes the waker's writes (e.g. the inbox push).
    if (state_.exchange(1, std::memory_order_release) == 0) futex_wake(&state_, 1);
  }

 private:
  std::atomic<std::uint32_t> state_{0};
};

}  // namespace capstan::rts
