// mutex.hpp - mutual exclusion for green threads: mutex and timed_mutex,
// std-compatible (std::lock_guard, std::unique_lock, std::scoped_lock work).
//
// Design: a word of state for the uncontended path (one CAS to lock, one to
// unlock, as a futex mutex) and a detail::mvar_core for the contended one,
// so a blocked locker parks its green thread exactly as an mvar taker does:
// interruptible by throw_to/kill_thread (also under mask, not under
// uninterruptible_mask), a shutdown checkpoint, seen by deadlock detection.
// Rejected: a spinning or OS-blocking lock (std::mutex) - it stalls every
// green thread of the capability, and deadlocks it if the holder parks
// (docs/api.md); an mvar<std::monostate> as the lock - correct, but two
// spinlock round trips per uncontended lock+unlock instead of two CASes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "capstan/detail/mvar_core.hpp"

namespace capstan {

class timed_mutex;
class condition_variable;

// mutex is std::mutex for green threads: lock parks the calling green
// thread (never its OS thread) while another thread holds the mutex.
// Waiters get the mutex in FIFO order, handed over directly by unlock
// (See Note [Mutex hand-off]).  Any green thread may lock; unlock must be
// called by the holder (as std), which may have migrated since locking.
class mutex {
 public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  // lock waits until the mutex is free and takes it; a safe point; needs a
  // green thread (usage_error otherwise).
  void lock() {
    detail::mvar_core::blocking_point("capstan::mutex::lock");
    std::uint32_t s = kFree;
    // Acquire pairs with unlock's release: the previous holder's writes are
    // visible to us.
    if (state_.compare_exchange_strong(s, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]]
      return;
    lock_slow(-1);
  }

  // try_lock takes the mutex if it is free and nobody waits for it, and
  // tells whether it did; never blocks; works from any thread.
  bool try_lock() noexcept {
    std::uint32_t s = kFree;
    return state_.compare_exchange_strong(s, kHeld, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  // unlock releases the mutex, handing it to the oldest waiter if any; the
  // caller must hold it.  Never throws and is not a safe point (it runs in
  // lock_guard's destructor); works from any thread.
  void unlock() noexcept {
    std::uint32_t s = kHeld;
    // Release pairs with the next locker's acquire.
    if (state_.compare_exchange_strong(s, kFree, std::memory_order_release,
                                       std::memory_order_relaxed)) [[likely]]
      return;
    unlock_slow();
  }

 private:
  friend class timed_mutex;
  friend class condition_variable;

  // Note [Mutex hand-off]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // state_ is kFree, kHeld (nobody waits) or kContended (held; waiters may
  // be queued on core_).  Invariant, under core_'s lock: a non-empty queue
  // implies kContended.  A locker that finds the mutex held takes core_'s
  // lock, moves kHeld -> kContended (or takes the mutex, if it went kFree
  // meanwhile), enqueues itself and parks; park releases core_'s lock only
  // once the thread is off the CPU.  unlock's CAS kHeld -> kFree fails
  // whenever a waiter may exist, sending it to unlock_slow, which takes
  // core_'s lock - so it cannot run between a locker's kContended and its
  // enqueue, and finds every waiter that set it.  unlock_slow hands the
  // mutex to the oldest waiter without ever making it kFree (kContended
  // stays, or kHeld if the queue is now empty): no fast-path locker can
  // barge in while anyone waits, and a thread re-locking in a loop queues
  // behind the waiters.  Barging happens only while nobody waits (the
  // uncontended fast path).  A waiter ended otherwise (time-out, throw_to,
  // shutdown) is taken off the queue by that party under core_'s lock
  // (Note [Timed takes], Note [Raising asynchronously]); exactly one of it
  // and unlock dequeues it, so either it owns the mutex and park returns
  // normally, or it never did.  A kContended mutex with an empty queue
  // (its waiters all left) is made kFree by its next unlock_slow.
  static constexpr std::uint32_t kFree = 0, kHeld = 1, kContended = 2;

  // lock_slow: lock, the mutex being held.  ns < 0: no time limit; else
  // gives up after ns nanoseconds, returning false.
  bool lock_slow(long long ns) {
    core_.lock();
    for (std::uint32_t s = state_.load(std::memory_order_relaxed);;) {
      if (s == kFree) {
        if (state_.compare_exchange_weak(s, kHeld, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          core_.unlock();
          return true;
        }
      } else if (s == kHeld) {
        // Relaxed: core_'s lock orders this against unlock_slow.
        if (state_.compare_exchange_weak(s, kContended, std::memory_order_relaxed,
                                         std::memory_order_relaxed))
          break;
      } else {
        break;
      }
    }
    if (ns == 0) {
      core_.unlock();  // (kContended with nobody queued: unlock_slow frees it)
      return false;
    }
    detail::waiter w;
    core_.enqueue(w);
    if (ns < 0) {
      core_.park(w);  // returns owning the mutex: unlock_slow handed it over
      return true;
    }
    return core_.park_timed(w, ns);
  }

  void unlock_slow() noexcept {
    core_.lock();
    rts::Thread* next = nullptr;
    if (detail::waiter* w = core_.front()) {
      next = core_.serve(*w);  // w owns the mutex now
      if (!core_.has_waiters()) state_.store(kHeld, std::memory_order_relaxed);
    } else {
      state_.store(kFree, std::memory_order_release);
    }
    core_.unlock();
    detail::wake_list woken;  // Note [Waking after unlock]
    if (next) woken.add(next);
    woken.wake_all();
  }

  std::atomic<std::uint32_t> state_{kFree};  // [atomic] Note [Mutex hand-off]
  detail::mvar_core core_;                   // the queue of lockers
};

// timed_mutex is mutex with time limits (std::timed_mutex).
class timed_mutex {
 public:
  timed_mutex() = default;
  timed_mutex(const timed_mutex&) = delete;
  timed_mutex& operator=(const timed_mutex&) = delete;

  // lock, try_lock and unlock are mutex's.
  void lock() {
    detail::mvar_core::blocking_point("capstan::timed_mutex::lock");
    if (!m_.try_lock()) m_.lock_slow(-1);
  }
  bool try_lock() noexcept { return m_.try_lock(); }
  void unlock() noexcept { m_.unlock(); }

  // try_lock_for is lock that gives up after `d`, telling whether it took
  // the mutex; an unlock racing with the time-out either hands this thread
  // the mutex (true) or the next waiter (false), never both.  Needs a green
  // thread; a safe point.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return timed(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  }
  // try_lock_until is try_lock_for until the time point `t`.
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return timed(std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()).count());
  }

 private:
  bool timed(long long ns) {
    detail::mvar_core::blocking_point("capstan::timed_mutex::try_lock_for");
    if (m_.try_lock()) return true;
    return m_.lock_slow(ns < 0 ? 0 : ns);
  }
  mutex m_;
};

}  // namespace capstan
