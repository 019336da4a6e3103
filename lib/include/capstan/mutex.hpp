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
    if (barge(s)) return;
    lock_slow(-1);
  }

  // try_lock takes the mutex if it is free, and tells whether it did;
  // never blocks; works from any thread.
  bool try_lock() noexcept {
    std::uint32_t s = kFree;
    if (state_.compare_exchange_strong(s, kHeld, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]]
      return true;
    return barge(s);
  }

  // unlock releases the mutex, handing it to the oldest waiter if any; the
  // caller must hold it.  Never throws and is not a safe point (it runs in
  // lock_guard's destructor); works from any thread.
  void unlock() noexcept {
    // A load first, then one CAS for what it saw: a barger's unlock (kBarged)
    // pays one locked instruction, not a failed CAS and another
    // (Note [Mutex hand-off]).  Relaxed: the CAS checks it.
    std::uint32_t s = state_.load(std::memory_order_relaxed);
    // Release pairs with the next locker's acquire.
    if (s == kHeld && state_.compare_exchange_strong(s, kFree, std::memory_order_release,
                                                     std::memory_order_relaxed)) [[likely]]
      return;
    if (unlock_barged(s)) return;
    unlock_slow();
  }

 private:
  friend class timed_mutex;
  friend class condition_variable;

  // Note [Mutex hand-off]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // state_'s low three bits are its kind: kFree (nobody holds or waits),
  // kHeld (held, nobody waits), kContended (held; waiters may be queued on
  // core_), kWoken (free; a waiter woken to compete - the competitor - is
  // on its way, others may be queued), kBarged (held by a thread that took
  // it ahead of the competitor, which is still on its way) or kOwed (free,
  // but reserved for the competitor).  The bits above count the overtakes:
  // how often a locker took the mutex ahead of the oldest waiter since a
  // waiter last got it.  Invariant: a non-empty queue or a competitor on
  // its way implies a kind other than kFree and kHeld, whose words are 0
  // and 1 exactly, so the fast paths (kFree -> kHeld, kHeld -> kFree) never
  // run while anyone waits.  A locker that finds the mutex held takes
  // core_'s lock, moves it to kContended (or takes it, if it went free
  // meanwhile), enqueues itself and parks; park releases core_'s lock only
  // once the thread is off the CPU, and unlock_slow needs that lock, so it
  // finds every waiter.
  //
  // The policy is Go's sync.Mutex, bounded by a count instead of a clock:
  // unlock_slow, with waiters, wakes the oldest waiter to compete (kWoken).
  // Until it comes back, any thread that locks (lock or try_lock;
  // typically the thread that just unlocked) may take the mutex first - it
  // barges, kWoken -> kBarged, counting one overtake - and that barger's
  // unlock makes it kWoken again, so a running thread keeps the mutex for a
  // whole turn instead of paying a wake, a park and a switch per critical
  // section.  The barge and the barger's unlock are one CAS each on state_,
  // without core_'s lock: a turn's lock costs two locked instructions (the
  // failed fast-path CAS and the barge) and its unlock one (it loads the
  // word first), where with core_'s lock they cost five together - on a
  // host whose locked instruction costs 5 ns, most of a contended
  // operation.  (A load before lock's CAS too would save one more there,
  // but cost the uncontended lock+unlock about 1 ns: docs/benchmarks.md.)  A competitor
  // that finds the mutex barged moves it to kContended, re-queues at the
  // *front*, and is woken to compete again by the barger's unlock, which
  // finds kContended and takes the slow path; the two race by CAS on
  // state_, and whichever loses sees the other's word.  Once the count
  // reaches max_overtakes, the barger's unlock makes the mutex kOwed,
  // reserved for the competitor; and an unlock_slow that finds the front
  // waiter overtaken max_overtakes times hands it the mutex directly
  // (lw.handed; the mutex never becomes free).  Timed waiters are always
  // handed the mutex (they could not otherwise be dequeued on time-out
  // without losing a wake-up).  So a waiter at the front of the queue is
  // overtaken at most max_overtakes times, and waiters are served in FIFO
  // order.  Barging at all (not pure hand-off) also keeps std::lock over
  // several mutexes live: its try_lock must sometimes succeed while others
  // queue, or scoped_lock(a, b) against scoped_lock(b, a) livelocks.
  //
  // Only the lock-free transitions above change state_ outside core_'s
  // lock: kFree <-> kHeld, kWoken -> kBarged, kBarged -> kWoken or kOwed.
  // So under core_'s lock, kContended, kOwed and an empty queue stay put.
  //
  // A served waiter returns from park and retries with no safe point in
  // between, so a competitor always comes back.  A waiter ended otherwise
  // (time-out, throw_to, shutdown) is taken off the queue by that party
  // under core_'s lock (Note [Timed takes], Note [Raising asynchronously]);
  // exactly one of it and unlock dequeues it, so either it was served or it
  // never was.  A kContended mutex with an empty queue is made kFree by its
  // next unlock_slow.  Checked by models/mutex_handoff.pml (docs/models.md).
  static constexpr std::uint32_t kFree = 0, kHeld = 1, kContended = 2, kWoken = 3, kOwed = 4,
                                 kBarged = 5;
  static constexpr std::uint32_t kKindMask = 7, kCountShift = 3;
  static constexpr std::uint32_t kind(std::uint32_t s) noexcept { return s & kKindMask; }
  static constexpr std::uint32_t count(std::uint32_t s) noexcept { return s >> kCountShift; }
  static constexpr std::uint32_t word(std::uint32_t kind, std::uint32_t count) noexcept {
    return kind | count << kCountShift;
  }

  // lock_wait: a locker's record, in its frame, reached from its waiter.
  struct lock_wait {
    bool lost = false;    // woken to compete before: re-queue at the front
    bool handed = false;  // [core_'s lock, then the wake] unlock made us owner
  };

  // barge takes a kWoken mutex ahead of its competitor, counting one
  // overtake; `s` is the state a failed CAS saw.  True if it took it.
  // kWoken always has fewer than max_overtakes (Note [Mutex hand-off]).
  bool barge(std::uint32_t s) noexcept {
    while (kind(s) == kWoken) {
      // Acquire pairs with the release of the unlock that made it kWoken.
      if (state_.compare_exchange_weak(s, word(kBarged, count(s) + 1), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;
    }
    return false;
  }

  // unlock_barged: a barger's unlock, the competitor still on its way: kWoken,
  // or kOwed once the count is spent.  False if the competitor came back
  // meanwhile (kContended): unlock_slow wakes it.  `s`: as barge.
  bool unlock_barged(std::uint32_t s) noexcept {
    while (kind(s) == kBarged) {
      std::uint32_t n = count(s);
      // Release pairs with the next taker's acquire (a barger's, or the
      // competitor's in acquire_locked).
      if (state_.compare_exchange_weak(s, n < max_overtakes ? word(kWoken, n) : kOwed,
                                       std::memory_order_release, std::memory_order_relaxed))
        return true;
    }
    return false;
  }

  // acquire_locked (core_'s lock held) takes a free mutex, or marks a held
  // one kContended; true if it took it.  `competitor`: the caller is the
  // waiter woken to compete, back for the mutex.
  bool acquire_locked(bool competitor) noexcept {
    // Acquire, on the load and on every failed CAS: a barger's unlock
    // writes kWoken and kOwed without core_'s lock, and whoever takes the
    // mutex from them must see its critical section.
    for (std::uint32_t s = state_.load(std::memory_order_acquire);;) {
      std::uint32_t to;
      bool takes;  // `to` gives us the mutex; else it marks that we queue
      switch (kind(s)) {
        case kOwed:
          if (!competitor) return false;
          // Nobody else moves kOwed: a plain store.
          state_.store(core_.has_waiters() ? kContended : kHeld, std::memory_order_relaxed);
          return true;
        case kFree:
          to = kHeld, takes = true;
          break;
        case kWoken:
          // The competitor takes it (a waiter got it: the count starts
          // again; others may be queued); anyone else barges.
          to = competitor ? kContended : word(kBarged, count(s) + 1), takes = true;
          break;
        case kHeld:
          to = kContended, takes = false;
          break;
        case kBarged:
          if (!competitor) return false;
          // Back and beaten: re-queue, and the barger's unlock will find
          // kContended and wake us again.  The count stands.
          to = word(kContended, count(s)), takes = false;
          break;
        default:  // kContended
          return false;
      }
      // Acquire on success too: needed where we take the mutex; where we
      // only mark it, core_'s lock orders us against unlock_slow, but the
      // success order may not be weaker than the failure order before
      // C++17 (GCC 12 still warns).
      if (state_.compare_exchange_weak(s, to, std::memory_order_acquire, std::memory_order_acquire))
        return takes;
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

  // unlock_slow: the holder's unlock of a kContended mutex (kBarged is
  // unlock_barged's; kContended leaves only through here).
  void unlock_slow() noexcept {
    core_.lock();
    rts::Thread* next = nullptr;
    std::uint32_t n = count(state_.load(std::memory_order_relaxed));
    if (detail::waiter* w = core_.front()) {
      auto* lw = static_cast<lock_wait*>(w->slot);
      if (n >= max_overtakes || w->timed) {
        lw->handed = true;     // w owns the mutex now; the count starts again
        next = core_.serve(*w);
        state_.store(core_.has_waiters() ? kContended : kHeld, std::memory_order_relaxed);
      } else {
        next = core_.serve(*w);
        // Release pairs with a barger's or the competitor's acquire.
        state_.store(word(kWoken, n), std::memory_order_release);
      }
    } else {
      state_.store(kFree, std::memory_order_release);
    }
    core_.unlock();
    detail::wake_list woken;  // Note [Waking after unlock]
    if (next) woken.add(next);
    woken.wake_all();
  }

  // The queue first: a thread dump names a blocked thread's primitive by
  // its queue's address, which is then the mutex's (Note [A thread dump is
  // a snapshot] in rts/thread/dump.cpp).
  detail::mvar_core core_;                   // the queue of lockers
  std::atomic<std::uint32_t> state_{kFree};  // [atomic] Note [Mutex hand-off]
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
