// semaphore.hpp - std::counting_semaphore / std::binary_semaphore for green
// threads.
//
// Design: a count and a detail::mvar_core queue, both under the queue's
// lock.  release hands units straight to the oldest waiters (FIFO) and
// only the rest go to the count, so a queued acquirer cannot be overtaken
// by a try_acquire.  Rejected: an atomic count with a futex-style wait
// word - faster uncontended, but FIFO order and exactly-once time-outs
// would need a second protocol beside the mvar machinery's.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>

#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"
#include "capstan/detail/duration.hpp"

namespace capstan {

// counting_semaphore<Max> holds a count in [0, Max]: acquire takes one unit,
// parking the calling green thread while there is none; release(n) gives n
// back.  Waiters are served in FIFO order.  acquire and the timed tries need
// a green thread and are safe points; try_acquire and release work from any
// thread.
template <std::ptrdiff_t Max = std::numeric_limits<std::ptrdiff_t>::max()>
class counting_semaphore {
  static_assert(Max >= 0, "counting_semaphore: Max must be non-negative");

 public:
  // max is the largest count the semaphore can hold.
  static constexpr std::ptrdiff_t max() noexcept { return Max; }

  // counting_semaphore(desired) starts with `desired` units (0..Max).
  explicit counting_semaphore(std::ptrdiff_t desired) : count_(desired) {
    if (desired < 0 || desired > Max)
      throw usage_error("capstan::counting_semaphore: initial count outside [0, max()]");
  }
  counting_semaphore(const counting_semaphore&) = delete;
  counting_semaphore& operator=(const counting_semaphore&) = delete;

  // release gives n units back, waking up to n waiters; usage_error if n is
  // negative or the count would pass max().
  void release(std::ptrdiff_t n = 1) {
    if (n < 0) throw usage_error("capstan::counting_semaphore::release: negative n");
    detail::wake_list woken;
    core_.lock();
    if (n > Max - count_) {
      core_.unlock();
      throw usage_error("capstan::counting_semaphore::release: the count would exceed max()");
    }
    // Invariant: waiters queue only while count_ == 0.
    for (; n > 0; --n) {
      detail::waiter* w = core_.front();
      if (!w) break;
      woken.add(core_.serve(*w));  // one unit handed to it
    }
    count_ += n;
    core_.unlock();
    woken.wake_all();
  }

  // acquire takes one unit, waiting for it if the count is zero.
  void acquire() {
    detail::mvar_core::blocking_point("capstan::counting_semaphore::acquire");
    acquire_ns(-1);
  }

  // try_acquire takes one unit if there is one and tells whether it did.
  bool try_acquire() noexcept {
    core_.lock();
    bool got = count_ > 0;
    if (got) --count_;
    core_.unlock();
    return got;
  }

  // try_acquire_for is acquire that gives up after `d`: true if it took a
  // unit.  A release racing with the time-out either hands this thread the
  // unit or leaves it for others, never both.
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    detail::mvar_core::blocking_point("capstan::counting_semaphore::try_acquire_for");
    return acquire_ns(detail::wait_ns(d));
  }
  // try_acquire_until is try_acquire_for until the time point `t`.
  template <class Clock, class Duration>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_acquire_for(std::chrono::nanoseconds(detail::ns_until(t)));
  }

 private:
  bool acquire_ns(long long ns) {
    core_.lock();
    if (count_ > 0) {
      --count_;
      core_.unlock();
      return true;
    }
    if (ns == 0) {
      core_.unlock();
      return false;
    }
    detail::waiter w(detail::waiter::semaphore);
    core_.enqueue(w);
    if (ns < 0) {
      core_.park(w);  // served: release handed us a unit
      return true;
    }
    return core_.park_timed(w, ns);
  }

  detail::mvar_core core_;    // the queue of acquirers
  std::ptrdiff_t count_;      // guarded by core_'s lock
};

// binary_semaphore is a counting_semaphore whose count is 0 or 1.
using binary_semaphore = counting_semaphore<1>;

}  // namespace capstan
