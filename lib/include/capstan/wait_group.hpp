// wait_group.hpp - Go's sync.WaitGroup for green threads: wait until a
// counted set of tasks has finished.
//
// Design: an atomic counter, so done() costs one atomic decrement unless it
// is the last, and a detail::mvar_core queue of waiters that the last
// done() wakes.  Rejected: a latch - its count is fixed up front, while
// add() may grow the group as work is discovered.
#pragma once

#include <atomic>
#include <cstddef>

#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"

namespace capstan {

// wait_group counts outstanding tasks: add(n) before starting them, done()
// as each finishes, wait() parks the calling green thread until the count
// is zero.  add/done work from any thread; wait needs a green thread and is
// a safe point.
class wait_group {
 public:
  // wait_group(n) starts with n outstanding tasks (default none).
  explicit wait_group(std::ptrdiff_t n = 0) : count_(n) {
    if (n < 0) throw usage_error("capstan::wait_group: negative count");
  }
  wait_group(const wait_group&) = delete;
  wait_group& operator=(const wait_group&) = delete;

  // add adds n (which may be negative) to the count, waking every waiter
  // if it reaches zero; usage_error if it would go negative.
  void add(std::ptrdiff_t n) {
    // acq_rel: release publishes this task's work to the waiter woken by
    // the last decrement; acquire orders the zero check after the others.
    // (An atomic's fetch_add wraps; the sum is checked here.)
    std::ptrdiff_t now;
    bool overflow = __builtin_add_overflow(count_.fetch_add(n, std::memory_order_acq_rel), n, &now);
    if (overflow || now < 0) {
      count_.fetch_sub(n, std::memory_order_relaxed);
      throw usage_error(overflow ? "capstan::wait_group::add: the count would overflow (more than "
                                   "PTRDIFF_MAX tasks outstanding)"
                                 : "capstan::wait_group: the count went negative (more done() than "
                                   "add())");
    }
    if (now == 0 && n != 0) wake_all();
  }

  // done is add(-1): one task has finished.
  void done() { add(-1); }

  // wait returns once the count is zero.
  void wait() {
    detail::mvar_core::blocking_point("capstan::wait_group::wait");
    if (count_.load(std::memory_order_acquire) == 0) return;
    // Note [Waiting for a group]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // The count is re-read under core_'s lock, and the last add() takes that
    // lock *after* its decrement reached zero.  Either this read sees zero
    // (the lock orders us after that add), or we queue before the add's
    // wake_all takes the lock, and it serves us.
    core_.lock();
    if (count_.load(std::memory_order_acquire) == 0) {
      core_.unlock();
      return;
    }
    detail::waiter w(detail::waiter::wait_group);
    core_.enqueue(w);
    core_.park(w);
  }

 private:
  void wake_all() noexcept {
    detail::wake_list woken;
    core_.lock();
    while (detail::waiter* w = core_.front()) woken.add(core_.serve(*w));
    core_.unlock();
    woken.wake_all();
  }

  std::atomic<std::ptrdiff_t> count_;  // [atomic] outstanding tasks
  detail::mvar_core core_;             // the queue of waiters
};

}  // namespace capstan
