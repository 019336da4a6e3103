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
#include "capstan/detail/duration.hpp"

namespace capstan {

class timed_mutex;
class condition_variable;

// mutex is std::mutex for green threads: lock parks the calling green
// thread (never its OS thread) while another thread holds the mutex.
// Waiters get the mutex in FIFO order; a thread that re-locks in a loop
// may overtake the oldest waiter, at most max_overtakes times (See Note
// [Mutex hand-off]).  Any green thread may lock; unlock must be
// called by the holder (as std), which may have migrated since locking.
class mutex {
 public:
  // max_overtakes: how often lockers may take the mutex ahead of the
  // oldest waiter before it is reserved for that waiter.
  static constexpr std::uint32_t max_overtakes = 64;

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

  // try_lock takes the mutex if it is free, and tells whether it did;
  // never blocks; works from any thread.
  bool try_lock() noexcept {
    std::uint32_t s = kFree;
    if (state_.compare_exchange_strong(s, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]]
      return true;
    return s == kWoken && try_lock_slow();
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
  // state_ is kFree (nobody holds or waits), kHeld (held, nobody waits),
  // kContended (held; waiters may be queued on core_), kWoken (free; a
  // waiter woken to compete is on its way, others may be queued) or kOwed
  // (free, but reserved for that woken waiter).  Invariant, under core_'s
  // lock: a non-empty queue or a woken competitor implies kContended,
  // kWoken or kOwed, so the fast paths (kFree -> kHeld, kHeld -> kFree)
  // never run while anyone waits: an unlock then always reaches
  // unlock_slow.  Only kFree/kHeld change outside core_'s lock.
  // A locker that finds the mutex held takes core_'s lock, moves it to
  // kContended (or takes it, if it went free meanwhile), enqueues itself
  // and parks; park releases core_'s lock only once the thread is off the
  // CPU, and unlock_slow needs that lock, so it finds every waiter.
  //
  // The policy is Go's sync.Mutex, bounded by a count instead of a clock:
  // unlock_slow, with waiters, wakes the oldest waiter to compete (the
  // mutex becomes kWoken, competitor_ set).  Until it comes back, any
  // thread that locks (lock or try_lock; typically the thread that just
  // unlocked) may take the mutex first - it barges - and that barger's
  // unlock makes it kWoken again, so a running thread keeps the mutex for a
  // whole turn instead of paying a wake, a park and a switch per critical
  // section.  A competitor that finds the mutex held re-queues at the
  // *front* and is woken to compete again by the next unlock.  Barges are
  // counted in overtakes_, the number of times the front waiter has been
  // overtaken; it is reset whenever a waiter gets the mutex.  Once it
  // reaches max_overtakes, the next unlock reserves the mutex for the front
  // waiter: kOwed if that waiter is already on its way, else it is handed
  // the mutex directly (lw.handed; the mutex never becomes free).  Timed
  // waiters are always handed the mutex (they could not otherwise be
  // dequeued on time-out without losing a wake-up).  So a waiter at the
  // front of the queue is overtaken at most max_overtakes times, and
  // waiters are served in FIFO order.  Barging at all (not pure hand-off)
  // also keeps std::lock over several mutexes live: its try_lock must
  // sometimes succeed while others queue, or scoped_lock(a, b) against
  // scoped_lock(b, a) livelocks.
  //
  // A served waiter returns from park and retries with no safe point in
  // between, so a competitor always comes back.  A waiter ended otherwise
  // (time-out, throw_to, shutdown) is taken off the queue by that party
  // under core_'s lock (Note [Timed takes], Note [Raising asynchronously]);
  // exactly one of it and unlock dequeues it, so either it was served or it
  // never was.  A kContended mutex with an empty queue is made kFree by its
  // next unlock_slow.
  static constexpr std::uint32_t kFree = 0, kHeld = 1, kContended = 2, kWoken = 3, kOwed = 4;

  // lock_wait: a locker's record, in its frame, reached from its waiter.
  struct lock_wait {
    bool lost = false;    // woken to compete before: re-queue at the front
    bool handed = false;  // [core_'s lock, then the wake] unlock made us owner
  };

  // acquire_locked (core_'s lock held) takes a free mutex, or marks a held
  // one kContended; true if it took it.  `competitor`: the caller is the
  // waiter woken to compete, back for the mutex.
  bool acquire_locked(bool competitor) noexcept {
    if (competitor) competitor_ = false;
    // Relaxed loads: kOwed and kWoken are written under core_'s lock, which
    // we hold; kFree is taken by the acquire CAS below.
    for (std::uint32_t s = state_.load(std::memory_order_relaxed);;) {
      if (s == kOwed) {
        if (!competitor) return false;
        overtakes_ = 0;
        state_.store(core_.has_waiters() ? kContended : kHeld, std::memory_order_relaxed);
        return true;
      }
      if (s == kFree || s == kWoken) {
        // From kWoken to kContended: others may still be queued.
        if (state_.compare_exchange_weak(s, s == kFree ? kHeld : kContended,
                                         std::memory_order_acquire, std::memory_order_relaxed)) {
          if (s == kWoken) {
            if (competitor) overtakes_ = 0; else ++overtakes_;  // a barge
          }
          return true;
        }
      } else if (s == kHeld) {
        // Relaxed: core_'s lock orders this against unlock_slow.
        if (state_.compare_exchange_weak(s, kContended, std::memory_order_relaxed,
                                         std::memory_order_relaxed))
          return false;
      } else {
        return false;
      }
    }
  }

  // lock_slow: lock, the fast path having failed.  ns < 0: no time limit;
  // else gives up after ns nanoseconds, returning false.
  bool lock_slow(long long ns) {
    lock_wait lw;
    for (;;) {
      core_.lock();
      if (acquire_locked(lw.lost)) {
        core_.unlock();
        return true;
      }
      if (ns == 0) {
        core_.unlock();  // (kContended with nobody queued: unlock_slow frees it)
        return false;
      }
      detail::waiter w(detail::waiter::mutex);
      w.slot = &lw;
      if (lw.lost) core_.enqueue_front(w); else core_.enqueue(w);
      if (ns < 0) core_.park(w);
      else if (!core_.park_timed(w, ns)) return false;  // (timed waiters are always handed)
      if (lw.handed) return true;
      lw.lost = true;  // woken to compete: retry; if overtaken, first in line
    }
  }

  // try_lock_slow: the mutex was kWoken - free, a woken waiter on its way;
  // barge, counted (Note [Mutex hand-off]).
  bool try_lock_slow() noexcept {
    core_.lock();
    bool got = state_.load(std::memory_order_relaxed) == kWoken && acquire_locked(false);
    core_.unlock();
    return got;
  }

  void unlock_slow() noexcept {
    core_.lock();
    rts::Thread* next = nullptr;
    if (competitor_) {
      // A barger's unlock: the competitor is still on its way.
      state_.store(overtakes_ < max_overtakes ? kWoken : kOwed, std::memory_order_release);
    } else if (detail::waiter* w = core_.front()) {
      auto* lw = static_cast<lock_wait*>(w->slot);
      if (overtakes_ >= max_overtakes || w->timed) {
        lw->handed = true;     // w owns the mutex now
        overtakes_ = 0;
        next = core_.serve(*w);
        if (!core_.has_waiters()) state_.store(kHeld, std::memory_order_relaxed);
      } else {
        next = core_.serve(*w);
        competitor_ = true;
        state_.store(kWoken, std::memory_order_release);
      }
    } else {
      overtakes_ = 0;
      state_.store(kFree, std::memory_order_release);
    }
    core_.unlock();
    detail::wake_list woken;  // Note [Waking after unlock]
    if (next) woken.add(next);
    woken.wake_all();
  }

  std::atomic<std::uint32_t> state_{kFree};  // [atomic] Note [Mutex hand-off]
  detail::mvar_core core_;                   // the queue of lockers
  bool competitor_ = false;  // guarded by core_'s lock: a woken waiter is on its way
  std::uint32_t overtakes_ = 0;  // guarded by core_'s lock: barges past the front waiter
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
    return timed(detail::wait_ns(d), "capstan::timed_mutex::try_lock_for");
  }
  // try_lock_until is try_lock_for until the time point `t`.
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return timed(detail::wait_ns_until(t), "capstan::timed_mutex::try_lock_until");
  }

 private:
  bool timed(long long ns, const char* what) {
    detail::mvar_core::blocking_point(what);
    if (m_.try_lock()) return true;
    return m_.lock_slow(ns);  // ns >= 0: detail::wait_ns
  }
  mutex m_;
};

}  // namespace capstan
