// fault_injection.hpp - make the runtime's own thread starts and
// allocations fail on demand, so tests can check that every failure is
// rolled back.
//
// Each knob is a countdown: -1 (the default) never fails; n >= 0 lets n
// more attempts succeed, fails the next one, and disarms itself.  Only
// tests set them (tests/rts/runtime/start_failure_test.cpp,
// tests/rts/foreign/in_call_failure_test.cpp, tests/rts/task/start_test.cpp,
// tests/rts/storage/stack_exhaustion_test.cpp,
// tests/rts/task/spare_start_test.cpp,
// tests/rts/exception/deadlock_test.cpp);
// in a normal run every check
// is one relaxed load of -1, on a path that is already slow (starting an
// OS thread, making an in-call's thread).
#pragma once

#include <atomic>

namespace capstan::rts::fault_injection {

inline std::atomic<int> fail_os_thread_start{-1};  // start_os_thread throws std::system_error
inline std::atomic<int> fail_ticker_start{-1};     // Ticker::start throws std::system_error
inline std::atomic<int> fail_incall_thread{-1};    // call_in's thread creation throws std::bad_alloc
// start_os_thread's narrowed start is refused, as by a sandbox that
// forbids setting affinity (Note [Starting on another CPU])
inline std::atomic<int> fail_narrowed_start{-1};
// Not a countdown: while set, every mapping of a new stack slab fails with
// ENOMEM, as when the address space or memory has run out (Note [Running
// out of stacks] in storage/stack.cpp).
inline std::atomic<bool> fail_stack_maps{false};
// Not a countdown: while set, every start_os_thread fails with EAGAIN, as
// under a thread limit (Note [No OS thread for a spare] in task/handover.cpp).
inline std::atomic<bool> refuse_os_threads{false};
// Not a countdown: microseconds the ticker sleeps between judging a quiet
// tick (deadlock_tick) and parking, widening the window that Note
// [Stopping the ticker] closes (tests/rts/exception/deadlock_test.cpp).
// 0, the default: no sleep, one relaxed load on the way to parking.
inline std::atomic<int> ticker_park_delay_us{0};
// Not a countdown: microseconds the IO thread sleeps in flush_wakes before
// it delivers the wake-ups a callback finished, widening the gap of Note
// [Wake-ups in flight] (io/wake_ups.cpp) for
// tests/rts/exception/deadlock_test.cpp.  0, the default: one relaxed load
// per flush that has something to wake.
inline std::atomic<int> io_wake_delay_us{0};
// Not a countdown: microseconds an idle capability sleeps between taking a
// spark and making its spark thread, as if its OS thread were preempted
// there (Note [Idle is not asleep] in exception/deadlock.cpp;
// tests/rts/exception/deadlock_test.cpp).  0, the default: one relaxed
// load per spark an idle capability takes.
inline std::atomic<int> idle_spark_delay_us{0};
// Not a countdown: microseconds the ticker sleeps after break_deadlock has
// woken the deadlock's victims, as if preempted there: anything counted
// after the wake-ups would still be missing when a victim reads
// statistics() (tests/rts/exception/deadlock_test.cpp).  0, the default:
// one relaxed load per deadlock broken.
inline std::atomic<int> deadlock_wake_delay_us{0};

// should_fail counts one attempt against `knob`: true if it must fail.
inline bool should_fail(std::atomic<int>& knob) noexcept {
  int n = knob.load(std::memory_order_relaxed);
  while (n >= 0 && !knob.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
  }
  return n == 0;
}

}  // namespace capstan::rts::fault_injection
