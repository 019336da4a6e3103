// condition_variable.hpp - std::condition_variable for green threads, used
// with capstan::mutex through std::unique_lock<capstan::mutex>.
//
// Design: a detail::mvar_core queue of waiters; notify serves the oldest
// (notify_one) or all.  Waiting parks the green thread through the mvar
// machinery, so it is interruptible, a shutdown checkpoint and seen by
// deadlock detection.  Rejected: std::condition_variable_any over
// capstan::mutex - it blocks the OS thread, and so the capability.
#pragma once

#include <chrono>
#include <condition_variable>  // std::cv_status
#include <exception>
#include <mutex>

#include "capstan/async_exception.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"
#include "capstan/mutex.hpp"

namespace capstan {

// condition_variable: wait parks the calling green thread until notified,
// releasing the mutex while parked and holding it again on return - also
// when the wait ends with an exception.  Waiters are woken in FIFO order.
// There are no spurious wake-ups: a wait returns only when notified, timed
// out, or ended by an exception.  notify_one/notify_all work from any
// thread, with or without the mutex held.
class condition_variable {
 public:
  condition_variable() = default;
  condition_variable(const condition_variable&) = delete;
  condition_variable& operator=(const condition_variable&) = delete;

  // notify_one wakes the oldest waiter, if any.
  void notify_one() noexcept {
    core_.lock();
    rts::Thread* t = nullptr;
    if (detail::waiter* w = core_.front()) t = core_.serve(*w);
    core_.unlock();
    detail::wake_list woken;  // Note [Waking after unlock]
    if (t) woken.add(t);
    woken.wake_all();
  }

  // notify_all wakes every waiter.
  void notify_all() noexcept {
    detail::wake_list woken;
    core_.lock();
    while (detail::waiter* w = core_.front()) woken.add(core_.serve(*w));
    core_.unlock();
    woken.wake_all();
  }

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
    return wait_ns(lk, clamp(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }

  // wait_until is wait_for until the time point `t`.
  template <class Clock, class Duration>
  std::cv_status wait_until(std::unique_lock<mutex>& lk,
                            const std::chrono::time_point<Clock, Duration>& t) {
    return wait_ns(lk, clamp(std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()).count()));
  }

  // wait_for(lk, d, pred) waits until pred() holds or `d` has passed, and
  // returns pred().
  template <class Rep, class Period, class Pred>
  bool wait_for(std::unique_lock<mutex>& lk, const std::chrono::duration<Rep, Period>& d, Pred pred) {
    return wait_until(lk, std::chrono::steady_clock::now() + d, std::move(pred));
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
  static long long clamp(long long ns) { return ns < 0 ? 0 : ns; }

  // Note [No lost notify]
  // ~~~~~~~~~~~~~~~~~~~~~~
  // The waiter enqueues itself under core_'s lock *before* it releases the
  // mutex, and park releases core_'s lock only once the thread is off the
  // CPU.  A notifier that changed the shared state did so holding the
  // mutex, so after the waiter's predicate check and enqueue; its notify
  // comes later still, takes core_'s lock, and finds the waiter queued.
  // Nothing can wake the waiter between its enqueue and its park: serving
  // needs core_'s lock.  Lock order: core_, then the mutex's queue lock
  // (taken by its unlock); nothing takes them in the other order.
  // A waiter ended otherwise (time-out, throw_to, shutdown) was dequeued
  // by that party under core_'s lock, so a notify racing with it serves
  // another waiter instead: exactly one wake-up per notify_one.
  //
  // Note [Relocking after a wait]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // wait returns holding the mutex, as std requires, however it ends.  After
  // a normal wake-up the mutex is re-taken under uninterruptible_mask, so an
  // asynchronous exception cannot leave lk not owning it; one that arrived
  // meanwhile is raised right after, with the mutex held.  When the park
  // itself throws (throw_to, shutdown), the mutex is re-taken while that
  // exception unwinds (relock's destructor): the runtime raises nothing
  // into a thread that is unwinding, so that lock cannot throw.
  std::cv_status wait_ns(std::unique_lock<mutex>& lk, long long ns) {
    detail::mvar_core::blocking_point("capstan::condition_variable::wait");
    if (!lk.owns_lock())
      throw usage_error("capstan::condition_variable::wait: the unique_lock does not own its mutex");
    detail::waiter w(detail::waiter::condition_variable);
    bool served;
    {
      struct relock {
        std::unique_lock<mutex>& lk;
        ~relock() {
          if (!lk.owns_lock()) lk.lock();  // unwinding: see Note [Relocking after a wait]
        }
      } guard{lk};
      core_.lock();
      core_.enqueue(w);
      lk.unlock();  // Note [No lost notify]: after the enqueue
      served = ns < 0 ? (core_.park(w), true) : core_.park_timed(w, ns);
      detail::mask_guard g(mask_state::masked_uninterruptible);
      lk.lock();
      g.leave();  // raises a pending exception, holding the mutex
    }
    return served ? std::cv_status::no_timeout : std::cv_status::timeout;
  }

  detail::mvar_core core_;  // the queue of waiters
};

}  // namespace capstan
