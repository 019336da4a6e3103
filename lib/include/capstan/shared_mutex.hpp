// shared_mutex.hpp - std::shared_mutex for green threads: one writer or
// many readers (std::shared_lock and std::unique_lock work with it).
//
// Design: the whole state under a detail::mvar_core's lock, with one FIFO
// queue of exclusive (waiter::take) and shared (waiter::read) waiters.
// Fair: a new reader queues behind a waiting writer, so writers are not
// starved; an unlock serves the front writer, or the run of readers at the
// front.  Rejected: reader-preferring (writers starve) and an atomic
// reader count fast path (simpler to keep one protocol; the uncontended
// cost is one spinlock round trip).
#pragma once

#include "capstan/detail/mvar_core.hpp"

namespace capstan {

// shared_mutex: lock/unlock for exclusive ownership, lock_shared/
// unlock_shared for shared.  Blocking locks park the calling green thread,
// are safe points and need a green thread; try_ locks and unlocks work from
// any thread.
class shared_mutex {
 public:
  shared_mutex() = default;
  shared_mutex(const shared_mutex&) = delete;
  shared_mutex& operator=(const shared_mutex&) = delete;

  // lock waits for exclusive ownership.
  void lock() {
    detail::mvar_core::blocking_point("capstan::shared_mutex::lock");
    core_.lock();
    if (!writer_ && readers_ == 0 && !core_.has_waiters()) {
      writer_ = true;
      core_.unlock();
      return;
    }
    park(detail::waiter::take);  // served: grant() made us the writer
  }
  // try_lock takes exclusive ownership if free, telling whether it did.
  bool try_lock() noexcept {
    core_.lock();
    bool got = !writer_ && readers_ == 0 && !core_.has_waiters();
    if (got) writer_ = true;
    core_.unlock();
    return got;
  }
  // unlock ends exclusive ownership.
  void unlock() noexcept {
    core_.lock();
    writer_ = false;
    grant();
  }

  // lock_shared waits for shared ownership (behind any queued writer).
  void lock_shared() {
    detail::mvar_core::blocking_point("capstan::shared_mutex::lock_shared");
    core_.lock();
    if (!writer_ && !core_.has_waiters()) {
      ++readers_;
      core_.unlock();
      return;
    }
    park(detail::waiter::read);  // served: grant() counted us in readers_
  }
  // try_lock_shared takes shared ownership if no writer holds or waits.
  bool try_lock_shared() noexcept {
    core_.lock();
    bool got = !writer_ && !core_.has_waiters();
    if (got) ++readers_;
    core_.unlock();
    return got;
  }
  // unlock_shared ends one shared ownership.
  void unlock_shared() noexcept {
    core_.lock();
    --readers_;
    grant();
  }

 private:
  void park(detail::waiter::kind_t kind) {
    detail::waiter w(detail::waiter::shared_mutex);
    w.kind = kind;
    core_.enqueue(w);
    core_.park(w);
  }
  // grant hands the lock to the front of the queue (lock held; releases
  // it): a writer if the lock is free, else the readers at the front.
  void grant() noexcept {
    detail::wake_list woken;
    while (detail::waiter* w = core_.front()) {
      if (w->kind == detail::waiter::take) {
        if (writer_ || readers_ != 0) break;
        writer_ = true;
        woken.add(core_.serve(*w));
        break;
      }
      if (writer_) break;
      ++readers_;
      woken.add(core_.serve(*w));
    }
    core_.unlock();
    woken.wake_all();  // Note [Waking after unlock]
  }

  detail::mvar_core core_;  // the queue of lockers
  bool writer_ = false;     // guarded by core_'s lock
  long readers_ = 0;        // guarded by core_'s lock
};

}  // namespace capstan
