// future.hpp - std::promise / std::future for green threads: get() parks
// the green thread until the value (or exception) is set.
//
// Design: a shared state (std::shared_ptr) holding the result and a
// detail::mvar_core queue of waiters; setting the result serves them all.
// Errors follow std: std::future_error with the std codes (broken_promise
// when a promise dies unset, promise_already_satisfied, future_already_
// retrieved, no_state).
#pragma once

#include <chrono>
#include <exception>
#include <future>  // std::future_error, std::future_status
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "capstan/detail/duration.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"

namespace capstan {

template <class T>
class future;
template <class T>
class promise;

namespace detail {

template <class T>
struct future_state {
  using stored = std::conditional_t<std::is_void_v<T>, std::monostate, T>;
  mvar_core core;                // the queue of waiters; guards the rest
  bool ready = false;
  std::optional<stored> value;
  std::exception_ptr error;

  // set stores the result (by fill(*this)) and wakes every waiter; throws
  // promise_already_satisfied if it was set already.
  template <class Fill>
  void set(Fill&& fill) {
    wake_list woken;
    core.lock();
    if (ready) {
      core.unlock();
      throw std::future_error(std::future_errc::promise_already_satisfied);
    }
    try {
      fill(*this);
    } catch (...) {
      core.unlock();
      throw;
    }
    ready = true;
    while (waiter* w = core.front()) woken.add(core.serve(*w));
    core.unlock();
    woken.wake_all();
  }

  // wait_ns waits until ready (ns < 0: no limit); true if ready.
  bool wait_ns(long long ns) {
    core.lock();
    if (ready) {
      core.unlock();
      return true;
    }
    if (ns == 0) {
      core.unlock();
      return false;
    }
    waiter w(waiter::future);
    core.enqueue(w);
    if (ns < 0) {
      core.park(w);
      return true;
    }
    return core.park_timed(w, ns);
  }
};

}  // namespace detail

// future<T> receives the result of a promise<T> once.  get, wait and the
// timed waits park the calling green thread, are safe points and need a
// green thread.
template <class T>
class future {
 public:
  future() noexcept = default;
  future(future&&) noexcept = default;
  future& operator=(future&&) noexcept = default;
  future(const future&) = delete;
  future& operator=(const future&) = delete;

  // valid tells whether the future still refers to a result (until get).
  bool valid() const noexcept { return state_ != nullptr; }

  // get waits for the result and returns it (or throws the stored
  // exception); the future is then no longer valid.
  T get() {
    detail::mvar_core::blocking_point("capstan::future::get");
    need_state();
    state_->wait_ns(-1);
    std::shared_ptr<detail::future_state<T>> s = std::move(state_);
    // ready is final once set: read without the lock after a wait saw it.
    if (s->error) std::rethrow_exception(s->error);
    if constexpr (!std::is_void_v<T>) return std::move(*s->value);
  }

  // wait returns once the result is ready.
  void wait() const {
    detail::mvar_core::blocking_point("capstan::future::wait");
    need_state();
    state_->wait_ns(-1);
  }

  // wait_for waits at most `d`: ready, or timeout.
  template <class Rep, class Period>
  std::future_status wait_for(const std::chrono::duration<Rep, Period>& d) const {
    detail::mvar_core::blocking_point("capstan::future::wait_for");
    need_state();
    return state_->wait_ns(detail::wait_ns(d)) ? std::future_status::ready : std::future_status::timeout;
  }
  // wait_until is wait_for until the time point `t`.
  template <class Clock, class Duration>
  std::future_status wait_until(const std::chrono::time_point<Clock, Duration>& t) const {
    return wait_for(std::chrono::nanoseconds(detail::ns_until(t)));
  }

 private:
  friend class promise<T>;
  explicit future(std::shared_ptr<detail::future_state<T>> s) : state_(std::move(s)) {}
  void need_state() const {
    if (!state_) throw std::future_error(std::future_errc::no_state);
  }
  std::shared_ptr<detail::future_state<T>> state_;
};

// promise<T> sets the result that its future receives; set_value and
// set_exception work from any thread.  A promise destroyed unset stores
// std::future_error(broken_promise).
template <class T>
class promise {
 public:
  promise() : state_(std::make_shared<detail::future_state<T>>()) {}
  promise(promise&&) noexcept = default;
  promise& operator=(promise&& o) noexcept {
    abandon();
    state_ = std::move(o.state_);
    retrieved_ = o.retrieved_;
    return *this;
  }
  promise(const promise&) = delete;
  promise& operator=(const promise&) = delete;
  ~promise() { abandon(); }

  // get_future returns the future of this promise; once only.
  future<T> get_future() {
    need_state();
    if (retrieved_) throw std::future_error(std::future_errc::future_already_retrieved);
    retrieved_ = true;
    return future<T>(state_);
  }

  // set_value stores v and wakes the future's waiters.
  template <class U = T>
    requires(!std::is_void_v<T> && std::is_constructible_v<T, U &&>)
  void set_value(U&& v) {
    need_state();
    state_->set([&](detail::future_state<T>& s) { s.value.emplace(std::forward<U>(v)); });
  }
  // set_value() completes a promise<void>.
  void set_value()
    requires std::is_void_v<T>
  {
    need_state();
    state_->set([](detail::future_state<T>& s) { s.value.emplace(); });
  }
  // set_exception stores e, which get() will throw; a null e is a
  // usage_error (get() would have had neither a value nor an exception).
  void set_exception(std::exception_ptr e) {
    need_state();
    if (!e) throw usage_error("capstan::promise::set_exception: the exception_ptr is null");
    state_->set([&](detail::future_state<T>& s) { s.error = std::move(e); });
  }

 private:
  void need_state() const {
    if (!state_) throw std::future_error(std::future_errc::no_state);
  }
  void abandon() noexcept {
    if (!state_) return;
    try {
      state_->set([](detail::future_state<T>& s) {
        s.error = std::make_exception_ptr(std::future_error(std::future_errc::broken_promise));
      });
    } catch (const std::future_error&) {
      // already satisfied: nothing to do
    }
    state_.reset();
  }
  std::shared_ptr<detail::future_state<T>> state_;
  bool retrieved_ = false;
};

}  // namespace capstan
