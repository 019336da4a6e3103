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
#include <string>

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
    // A compare-exchange, not a fetch_add, so that the count never shows a
    // value it should not (a negative one undone, or a zero before its
    // waiters are served): see Note [Waiting for a group].
    std::ptrdiff_t c = count_.load(std::memory_order_relaxed);
    for (;;) {
      std::ptrdiff_t now;
      bool overflow = __builtin_add_overflow(c, n, &now);
      if (overflow || now < 0) [[unlikely]]
        throw usage_error(overflow ? std::string("capstan::wait_group::add: the count would overflow "
                                                 "(more than PTRDIFF_MAX tasks outstanding)")
                                   : "capstan::wait_group: add(" + std::to_string(n) +
                                         ") on a count of " + std::to_string(c) +
                                         " would make it negative (more done() or negative add() "
                                         "than add())");
      if (now == 0 && n != 0) {
        if (reach_zero(c)) return;
        continue;  // c was stale: try again with the count it read
      }
      if (count_.compare_exchange_weak(c, now, std::memory_order_acq_rel, std::memory_order_relaxed))
        return;
    }
  }
  // done is add(-1): one task has finished.
  void done() { add(-1); }

  // wait returns once the count is zero.
  void wait() {
    detail::mvar_core::blocking_point("capstan::wait_group::wait");
    // Note [Waiting for a group]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // The count reaches zero only under core_'s lock, in the same critical
    // section that serves every queued waiter (reach_zero), and a waiter
    // re-reads it under that lock before it queues.  So either this read
    // sees zero, or we queue before the zero and are served with it; and
    // no waiter that queued after a zero - because the group was reused,
    // add() raising it again once an earlier wait() returned, as Go allows
    // - can be served by that zero.  (The decrement used to come before the
    // lock: a waiter could return on the zero, add(1), queue again, and be
    // woken by the late serving with the count at 1.)  No lost wake-up: a
    // waiter that read a non-zero count under the lock is queued before
    // the lock is released, and the zero that serves it needs the lock.
    // The count is read under the lock even when it is already zero: a
    // waiter that returned on an unlocked read of the zero could destroy
    // the group while the last done() still held core_'s lock, whose
    // release then wrote into freed memory.  Taking the lock waits for
    // that release, done()'s last touch of the group.
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
  // reach_zero takes the count from `c` to zero and serves every waiter,
  // under core_'s lock (Note [Waiting for a group]); false, with c updated,
  // if the count was no longer c.
  bool reach_zero(std::ptrdiff_t& c) noexcept {
    detail::wake_list woken;
    core_.lock();
    if (!count_.compare_exchange_strong(c, 0, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      core_.unlock();
      return false;
    }
    while (detail::waiter* w = core_.front()) woken.add(core_.serve(*w));
    core_.unlock();
    woken.wake_all();
    return true;
  }

  // The queue first: a thread dump names a blocked thread's primitive by
  // its queue's address (Note [A thread dump is a snapshot] in
  // rts/thread/dump.cpp).
  detail::mvar_core core_;             // the queue of waiters
  std::atomic<std::ptrdiff_t> count_;  // [atomic] outstanding tasks
};

}  // namespace capstan
