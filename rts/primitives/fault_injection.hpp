// fault_injection.hpp - make the runtime's own allocations and thread starts
// fail on demand, so tests can check that every failure is rolled back.
//
// Each counter is the number of upcoming attempts that fail; the tests set
// it (tests/rts/runtime/start_failure_test.cpp) and nobody else does, so
// in a normal run every check is one relaxed load of a zero on a path that
// is already slow (starting an OS thread, creating a Task).
#pragma once

#include <atomic>

namespace capstan::rts::fault_injection {

inline std::atomic<int> fail_os_thread_start{0};  // start_os_thread throws std::system_error
inline std::atomic<int> fail_ticker_start{0};     // Ticker::start throws std::system_error
inline std::atomic<int> fail_incall_thread{0};    // call_in's thread creation throws std::bad_alloc

// should_fail consumes one failure of `counter`, if any is armed.
inline bool should_fail(std::atomic<int>& counter) noexcept {
  int n = counter.load(std::memory_order_relaxed);
  while (n > 0 && !counter.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
  return n > 0;
}

}  // namespace capstan::rts::fault_injection
