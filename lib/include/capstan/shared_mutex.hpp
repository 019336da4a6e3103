// shared_mutex.hpp - std::shared_mutex and std::shared_timed_mutex for
// green threads: one writer or many readers (std::shared_lock and
// std::unique_lock work with it, their timed constructors too).
//
// Design: the whole state under a detail::mvar_core's lock, with one FIFO
// queue of exclusive (waiter::take) and shared (waiter::read) waiters.
// Fair: a new reader queues behind a waiting writer, so writers are not
// starved; an unlock serves the front writer, or the run of readers at the
// front.  Rejected: reader-preferring (writers starve) and an atomic
// reader count fast path (simpler to keep one protocol; the uncontended
// cost is one spinlock round trip).
#pragma once

#include <chrono>

#include "capstan/detail/mvar_core.hpp"
#include "capstan/detail/duration.hpp"

namespace capstan {

// shared_mutex: lock/unlock for exclusive ownership, lock_shared/
// unlock_shared for shared, and the timed try_lock_for/_until and
// try_lock_shared_for/_until of std::shared_timed_mutex.  Blocking and
// timed locks park the calling green thread, are safe points and need a
// green thread; untimed try_ locks and unlocks work from any thread.
class shared_mutex {
 public:
  shared_mutex() = default;
  shared_mutex(const shared_mutex&) = delete;
  shared_mutex& operator=(const shared_mutex&) = delete;

  // lock waits for exclusive ownership.
  void lock() {
    detail::mvar_core::blocking_point("capstan::shared_mutex::lock");
    core_.lock();
    if (!core_.writer && core_.readers == 0 && !core_.has_waiters()) {
      core_.writer = true;
      core_.unlock();
      return;
    }
    park(detail::waiter::take, -1);  // served: grant() made us the writer
  }
  // try_lock takes exclusive ownership if free, telling whether it did.
  bool try_lock() noexcept {
    core_.lock();
    bool got = !core_.writer && core_.readers == 0 && !core_.has_waiters();
    if (got) core_.writer = true;
    core_.unlock();
    return got;
  }
  // unlock ends exclusive ownership.
  void unlock() noexcept {
    core_.lock();
    core_.writer = false;
    grant();
  }

  // lock_shared waits for shared ownership (behind any queued writer).
  void lock_shared() {
    detail::mvar_core::blocking_point("capstan::shared_mutex::lock_shared");
    core_.lock();
    if (!core_.writer && !core_.has_waiters()) {
      ++core_.readers;
      core_.unlock();
      return;
    }
    park(detail::waiter::read, -1);  // served: grant() counted us in core_.readers
  }
  // try_lock_shared takes shared ownership if no writer holds or waits.
  bool try_lock_shared() noexcept {
    core_.lock();
    bool got = !core_.writer && !core_.has_waiters();
    if (got) ++core_.readers;
    core_.unlock();
    return got;
  }
  // unlock_shared ends one shared ownership.
  void unlock_shared() noexcept {
    core_.lock();
    --core_.readers;
    grant();
  }

  // try_lock_for is lock that gives up after `d`, telling whether it took
  // exclusive ownership; a release racing with the time-out either grants
  // it to this thread (true) or not at all (false), never both.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return timed(detail::waiter::take, "capstan::shared_mutex::try_lock_for", detail::wait_ns(d));
  }
  // try_lock_until is try_lock_for until the time point `t`.
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return timed(detail::waiter::take, "capstan::shared_mutex::try_lock_until", detail::wait_ns_until(t));
  }
  // try_lock_shared_for is lock_shared that gives up after `d` (queued
  // behind any waiting writer, as lock_shared), telling whether it took
  // shared ownership; a release racing with the time-out grants it once.
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return timed(detail::waiter::read, "capstan::shared_mutex::try_lock_shared_for", detail::wait_ns(d));
  }
  // try_lock_shared_until is try_lock_shared_for until the time point `t`.
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
    return timed(detail::waiter::read, "capstan::shared_mutex::try_lock_shared_until",
                 detail::wait_ns_until(t));
  }

 private:

  // timed: a timed lock (take) or lock_shared (read) of at most ns.
  bool timed(detail::waiter::kind_t kind, const char* what, long long ns) {
    detail::mvar_core::blocking_point(what);
    core_.lock();
    if (kind == detail::waiter::take ? !core_.writer && core_.readers == 0 && !core_.has_waiters()
                                     : !core_.writer && !core_.has_waiters()) {
      if (kind == detail::waiter::take) core_.writer = true; else ++core_.readers;
      core_.unlock();
      return true;
    }
    if (ns == 0) {
      core_.unlock();
      return false;
    }
    return park(kind, ns);
  }

  // Note [Leaving the shared_mutex queue]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // park enqueues a waiter (core_'s lock held) and parks it; grant() serves
  // it, or a time-out or an asynchronous exception takes it off the queue
  // under core_'s lock - exactly one of them (Note [Timed takes]), so a
  // served waiter owns the lock and one that left does not.  A waiter that
  // leaves may have been what held others back: a writer queued in front
  // of readers while readers hold the lock keeps those readers waiting.
  // So the grant runs once more when it leaves: without it those readers
  // would wait for the next unlock, and forever if the holders are waiting
  // for them.  It runs where the waiter is taken off, under the same lock
  // (detail::leave_queue, called by the runtime's time-out, throw_to,
  // shutdown and the waiter's own checkpoints), not by the leaving thread
  // afterwards: once kill_thread has returned, or the time-out has fired,
  // the program may destroy the shared_mutex, and the leaver must not
  // touch it again (it did, and spun on freed memory).  grant() serves only
  // what the state allows, so running it needlessly is harmless.
  bool park(detail::waiter::kind_t kind, long long ns) {
    detail::waiter w(detail::waiter::shared_mutex);
    w.kind = kind;
    w.regrant = true;
    core_.enqueue(w);
    return ns < 0 ? (core_.park(w), true) : core_.park_timed(w, ns);
  }
  // grant hands the lock to the front of the queue (lock held; releases
  // it), then wakes whom it served.
  void grant() noexcept {
    detail::wake_list woken;
    core_.grant(woken);
    core_.unlock();
    woken.wake_all();  // Note [Waking after unlock]
  }

  detail::shared_core core_;  // the queue of lockers, and who holds the lock
};

// shared_timed_mutex is std::shared_timed_mutex's name for shared_mutex,
// which already has the timed locks.
using shared_timed_mutex = shared_mutex;

}  // namespace capstan
