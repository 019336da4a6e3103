// condition_variable.hpp - std::condition_variable and
// std::condition_variable_any for green threads: condition_variable with
// capstan::mutex through std::unique_lock<capstan::mutex>,
// condition_variable_any with any lock (capstan::mutex itself,
// std::unique_lock<capstan::shared_mutex>, std::shared_lock<...>, ...).
//
// Design: a detail::mvar_core queue of waiters (detail::cv_queue, shared
// by both); notify serves the oldest (notify_one) or all.  Waiting parks
// the green thread through the mvar machinery, so it is interruptible, a
// shutdown checkpoint and seen by deadlock detection.  Rejected:
// std::condition_variable_any over capstan::mutex - it blocks the OS
// thread, and so the capability.
#pragma once

#include <chrono>
#include <concepts>
#include <condition_variable>  // std::cv_status
#include <exception>
#include <mutex>

#include "capstan/async_exception.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"
#include "capstan/mutex.hpp"
#include "capstan/detail/duration.hpp"

namespace capstan {

namespace detail {

// cv_queue: the waiters of a condition variable, and how to wait given a
// lock with lock() and unlock().
class cv_queue {
 public:
  void notify_one() noexcept {
    core_.lock();
    rts::Thread* t = nullptr;
    if (waiter* w = core_.front()) t = core_.serve(*w);
    core_.unlock();
    wake_list woken;  // Note [Waking after unlock]
    if (t) woken.add(t);
    woken.wake_all();
  }

  void notify_all() noexcept {
    wake_list woken;
    core_.lock();
    while (waiter* w = core_.front()) woken.add(core_.serve(*w));
    core_.unlock();
    woken.wake_all();
  }

  // Note [No lost notify]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // The waiter enqueues itself under core_'s lock *before* it releases the
  // lock `lk`, and park releases core_'s lock only once the thread is off
  // the CPU.  A notifier that changed the shared state did so holding lk,
  // so after the waiter's predicate check and enqueue; its notify comes
  // later still, takes core_'s lock, and finds the waiter queued.  Nothing
  // can wake the waiter between its enqueue and its park: serving needs
  // core_'s lock.  Lock order: core_, then whatever lk's unlock takes (for
  // the capstan locks, their own queue lock); nothing takes them in the
  // other order, as long as lk's unlock does not touch this condition
  // variable (condition_variable_any states it).
  // A waiter ended otherwise (time-out, throw_to, shutdown) was dequeued
  // by that party under core_'s lock, so a notify racing with it serves
  // another waiter instead: exactly one wake-up per notify_one.  And a
  // waiter that was served but then ends with an exception - one that
  // arrived after the notify, raised while it re-takes lk or right after -
  // passes the notification on to the next waiter before the exception
  // leaves wait (notify_one), so no notify is lost to a kill (Java's rule
  // for an interrupted wait).  It does so under either notify: after a
  // notify_all the waiters it could wake are ones that queued later, woken
  // once for a notify they did not see; a wait may return so only when
  // another waiter was killed, and callers re-check their condition.
  //
  // Note [Relocking after a wait]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // wait returns holding lk, as std requires, however it ends.  After a
  // wake-up lk is re-taken under mask (at least masked_interruptible): if
  // it is free, nothing is raised; if the lock blocks, the block is
  // interruptible, as every capstan blocking call under mask is.  An
  // uninterruptible relock made a killer that holds lk and calls
  // kill_thread (which returns only once the kill has landed) wait for ever
  // for a thread that waited for lk.  An exception raised in the relock,
  // or pending and raised once lk is held, leaves wait with lk held:
  // relock's destructor re-takes lk while the exception unwinds, and the
  // runtime raises nothing into a thread that is unwinding, so that lock
  // cannot throw (and the killer, having returned, lets go of lk).  When
  // the park itself throws (throw_to, shutdown), lk is re-taken the same
  // way.
  //
  // wait: release lk, park until served or ns have passed (ns < 0: no
  // limit), take lk again; true if served.
  template <class Lock>
  bool wait(Lock& lk, long long ns) {
    waiter w(waiter::condition_variable);
    struct relock {
      cv_queue& q;
      Lock& lk;
      bool released = false;
      bool served = false;
      ~relock() {
        if (released) [[unlikely]] unwind_relock(q, lk, served);
      }
    } guard{*this, lk};
    core_.lock();
    core_.enqueue(w);
    try {
      lk.unlock();  // Note [No lost notify]: after the enqueue
    } catch (...) {
      // A lock whose unlock throws (one it does not hold, say): nobody can
      // have served w, as that needs core_'s lock; leave as we came.
      core_.remove(w);
      core_.unlock();
      throw;
    }
    guard.released = true;
    const bool served = guard.served =
        ns < 0 ? (core_.park(w), true) : core_.park_timed(w, ns);
    mask_guard g(mask_state::masked_interruptible);
    lk.lock();  // interruptible if it blocks: Note [Relocking after a wait]
    guard.released = false;
    try {
      g.leave();  // raises a pending exception, holding lk
    } catch (...) {
      if (served) notify_one();  // Note [No lost notify]
      throw;
    }
    return served;
  }

 private:
  // unwind_relock: wait is ending with an exception; pass a notification it
  // was served on, and take lk again.  Out of line and cold: the hot path
  // of a wait pays nothing for it.
  template <class Lock>
  [[gnu::noinline, gnu::cold]] static void unwind_relock(cv_queue& q, Lock& lk, bool served) {
    // See Notes [No lost notify], [Relocking after a wait].
    if (served) q.notify_one();
    lk.lock();
  }

  mvar_core core_;  // the queue of waiters
};

}  // namespace detail

// condition_variable: wait parks the calling green thread until notified,
// releasing the mutex while parked and holding it again on return - also
// when the wait ends with an exception.  Waiters are woken in FIFO order.
// There are no spurious wake-ups: a wait returns only when notified, timed
// out, or ended by an exception (a notification passed on by a waiter that
// was killed after its notify counts as one: Note [No lost notify]).  The
// condition variable must outlive the return from wait of every waiter it
// has notified.  notify_one/notify_all work from any
// thread, with or without the mutex held.
class condition_variable {
 public:
  condition_variable() = default;
  condition_variable(const condition_variable&) = delete;
  condition_variable& operator=(const condition_variable&) = delete;

  // notify_one wakes the oldest waiter, if any.
  void notify_one() noexcept { q_.notify_one(); }

  // notify_all wakes every waiter.
  void notify_all() noexcept { q_.notify_all(); }

  // wait releases lk's mutex, parks until notified, and locks it again; lk
  // must own its mutex.  A safe point; needs a green thread.
  void wait(std::unique_lock<mutex>& lk) { wait_ns(lk, -1); }

  // wait(lk, pred) is `while (!pred()) wait(lk);`.
  template <class Pred>
  void wait(std::unique_lock<mutex>& lk, Pred pred) {
    while (!pred()) wait(lk);
  }

  // wait_for is wait that gives up after `d`: cv_status::timeout if it was
  // not notified in that time.  A notify racing with the time-out either
  // wakes this thread (no_timeout) or another waiter, never both.
  template <class Rep, class Period>
  std::cv_status wait_for(std::unique_lock<mutex>& lk, const std::chrono::duration<Rep, Period>& d) {
    return wait_ns(lk, detail::wait_ns(d));
  }

  // wait_until is wait_for until the time point `t`.
  template <class Clock, class Duration>
  std::cv_status wait_until(std::unique_lock<mutex>& lk,
                            const std::chrono::time_point<Clock, Duration>& t) {
    return wait_ns(lk, detail::wait_ns_until(t));
  }

  // wait_for(lk, d, pred) waits until pred() holds or `d` has passed, and
  // returns pred().
  template <class Rep, class Period, class Pred>
  bool wait_for(std::unique_lock<mutex>& lk, const std::chrono::duration<Rep, Period>& d, Pred pred) {
    return wait_until(lk, std::chrono::steady_clock::now() + std::chrono::nanoseconds(detail::to_ns(d)),
                      std::move(pred));
  }

  // wait_until(lk, t, pred) waits until pred() holds or `t` has passed, and
  // returns pred().
  template <class Clock, class Duration, class Pred>
  bool wait_until(std::unique_lock<mutex>& lk, const std::chrono::time_point<Clock, Duration>& t,
                  Pred pred) {
    while (!pred())
      if (wait_until(lk, t) == std::cv_status::timeout) return pred();
    return true;
  }

 private:
  std::cv_status wait_ns(std::unique_lock<mutex>& lk, long long ns) {
    detail::mvar_core::blocking_point("capstan::condition_variable::wait");
    if (!lk.owns_lock())
      throw usage_error("capstan::condition_variable::wait: the unique_lock does not own its mutex");
    return q_.wait(lk, ns) ? std::cv_status::no_timeout : std::cv_status::timeout;
  }

  detail::cv_queue q_;
};

// condition_variable_any is condition_variable for any lock `lk` with
// lock() and unlock() (BasicLockable): capstan::mutex itself,
// std::unique_lock<capstan::shared_mutex>, std::shared_lock<...>.  Same
// guarantees: FIFO, no lost notify, no spurious wake-ups, lk held again on
// return however the wait ends.  lk must be held by the caller (a lock
// with owns_lock() that does not own its mutex is a usage_error; an
// exception from unlock() leaves wait with nothing queued and lk as it
// was); its unlock() must not block nor notify this condition variable
// (it runs while the wait is being queued).  Waiting with a lock that
// blocks the OS thread (std::mutex) has the pitfall of std::mutex.
class condition_variable_any {
 public:
  condition_variable_any() = default;
  condition_variable_any(const condition_variable_any&) = delete;
  condition_variable_any& operator=(const condition_variable_any&) = delete;

  // notify_one wakes the oldest waiter, if any; from any thread.
  void notify_one() noexcept { q_.notify_one(); }

  // notify_all wakes every waiter; from any thread.
  void notify_all() noexcept { q_.notify_all(); }

  // wait releases lk, parks until notified, and takes lk again.  A safe
  // point; needs a green thread.
  template <class Lock>
  void wait(Lock& lk) {
    wait_ns(lk, -1);
  }

  // wait(lk, pred) is `while (!pred()) wait(lk);`.
  template <class Lock, class Pred>
  void wait(Lock& lk, Pred pred) {
    while (!pred()) wait(lk);
  }

  // wait_for is wait that gives up after `d`: cv_status::timeout if it was
  // not notified in that time.  A notify racing with the time-out either
  // wakes this thread (no_timeout) or another waiter, never both.
  template <class Lock, class Rep, class Period>
  std::cv_status wait_for(Lock& lk, const std::chrono::duration<Rep, Period>& d) {
    return wait_ns(lk, detail::wait_ns(d));
  }

  // wait_until is wait_for until the time point `t`.
  template <class Lock, class Clock, class Duration>
  std::cv_status wait_until(Lock& lk, const std::chrono::time_point<Clock, Duration>& t) {
    return wait_ns(lk, detail::wait_ns_until(t));
  }

  // wait_for(lk, d, pred) waits until pred() holds or `d` has passed, and
  // returns pred().
  template <class Lock, class Rep, class Period, class Pred>
  bool wait_for(Lock& lk, const std::chrono::duration<Rep, Period>& d, Pred pred) {
    return wait_until(lk, std::chrono::steady_clock::now() + std::chrono::nanoseconds(detail::to_ns(d)),
                      std::move(pred));
  }

  // wait_until(lk, t, pred) waits until pred() holds or `t` has passed, and
  // returns pred().
  template <class Lock, class Clock, class Duration, class Pred>
  bool wait_until(Lock& lk, const std::chrono::time_point<Clock, Duration>& t, Pred pred) {
    while (!pred())
      if (wait_until(lk, t) == std::cv_status::timeout) return pred();
    return true;
  }

 private:
  template <class Lock>
  std::cv_status wait_ns(Lock& lk, long long ns) {
    detail::mvar_core::blocking_point("capstan::condition_variable_any::wait");
    if constexpr (requires { { lk.owns_lock() } -> std::convertible_to<bool>; }) {
      if (!lk.owns_lock())
        throw usage_error("capstan::condition_variable_any::wait: the lock does not own its mutex");
    }
    return q_.wait(lk, ns) ? std::cv_status::no_timeout : std::cv_status::timeout;
  }

  detail::cv_queue q_;
};

}  // namespace capstan
