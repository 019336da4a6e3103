// latch.hpp - std::latch for green threads: a single-use countdown that
// threads wait on until it reaches zero.
#pragma once

#include <cstddef>
#include <limits>

#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"

namespace capstan {

// latch counts down from `expected`; wait parks the calling green thread
// until the count is zero, then every waiter is woken.  count_down and
// try_wait work from any thread; wait and arrive_and_wait need a green
// thread and are safe points.
class latch {
 public:
  // max is the largest initial count.
  static constexpr std::ptrdiff_t max() noexcept { return std::numeric_limits<std::ptrdiff_t>::max(); }

  // latch(expected) starts at `expected` (>= 0).
  explicit latch(std::ptrdiff_t expected) : count_(expected) {
    if (expected < 0) throw usage_error("capstan::latch: negative expected count");
  }
  latch(const latch&) = delete;
  latch& operator=(const latch&) = delete;

  // count_down lowers the count by n, waking every waiter when it reaches
  // zero; usage_error if n is negative or more than the count.
  void count_down(std::ptrdiff_t n = 1) {
    detail::wake_list woken;
    core_.lock();
    if (n < 0 || n > count_) {
      core_.unlock();
      throw usage_error("capstan::latch::count_down: n is negative or more than the count left");
    }
    count_ -= n;
    if (count_ == 0)
      while (detail::waiter* w = core_.front()) woken.add(core_.serve(*w));
    core_.unlock();
    woken.wake_all();
  }

  // try_wait tells whether the count has reached zero.
  bool try_wait() const noexcept {
    core_.lock();
    bool zero = count_ == 0;
    core_.unlock();
    return zero;
  }

  // wait returns once the count is zero.
  void wait() const {
    detail::mvar_core::blocking_point("capstan::latch::wait");
    wait_zero();
  }

  // arrive_and_wait is count_down(n) then wait().
  void arrive_and_wait(std::ptrdiff_t n = 1) {
    detail::mvar_core::blocking_point("capstan::latch::arrive_and_wait");
    count_down(n);
    wait_zero();
  }

 private:
  // (No lost wake-up: the count is read and the waiter queued under one
  // hold of core_'s lock, which count_down needs to reach zero.)
  void wait_zero() const {
    core_.lock();
    if (count_ == 0) {
      core_.unlock();
      return;
    }
    detail::waiter w(detail::waiter::latch);
    core_.enqueue(w);
    core_.park(w);
  }

  mutable detail::mvar_core core_;  // the queue of waiters
  std::ptrdiff_t count_;            // guarded by core_'s lock
};

}  // namespace capstan
