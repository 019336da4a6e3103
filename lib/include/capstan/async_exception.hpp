// async_exception.hpp - stopping threads from outside: asynchronous
// exceptions (GHC's throwTo, killThread), masks, and thread status.
#pragma once

#include <cstdint>
#include <exception>
#include <type_traits>
#include <utility>

#include "capstan/errors.hpp"
#include "capstan/thread.hpp"

namespace capstan {

// How a thread takes asynchronous exceptions (GHC's MaskingState).
enum class mask_state : std::uint8_t {
  unmasked,                // raised at the next safe point
  masked_interruptible,    // raised only at a blocking call, or at unmask
  masked_uninterruptible,  // raised only at unmask
};

// What a thread is doing (GHC's ThreadStatus); running includes runnable.
enum class thread_state : std::uint8_t { running, blocked, finished, died };

namespace detail {
// The runtime's halves (rts/exception/); not part of the API.
// `what` names the public call in errors.
void throw_to_ptr(thread_ref t, std::exception_ptr e, const char* what = "capstan::throw_to");
const std::exception_ptr& thread_killed_ptr();
mask_state set_mask(mask_state s);  // returns the previous state
mask_state raise_mask(mask_state at_least);  // masks at least this much; returns the previous
void check_unmasked();  // raises a pending exception if the mask now allows it
bool green_thread_here() noexcept;  // is the caller a green thread (one that has a mask)?

// mask_guard holds a mask state for a scope and puts the previous one back.
class mask_guard {
 public:
  explicit mask_guard(mask_state at_least) : prev_(raise_mask(at_least)) {}
  mask_guard(const mask_guard&) = delete;
  mask_guard& operator=(const mask_guard&) = delete;
  // leave ends the scope normally: previous state back, and a pending
  // exception raised if that state allows it.
  void leave() {
    left_ = true;
    set_mask(prev_);
    check_unmasked();
  }
  ~mask_guard() {
    if (!left_) set_mask(prev_);  // unwinding: nothing is raised here
  }
  mask_state previous() const { return prev_; }

 private:
  mask_state prev_;
  bool left_ = false;
};

template <class F, class... A>
auto run_then_leave(mask_guard& g, F& f, A&&... a) {
  using R = std::invoke_result_t<F&, A...>;
  if constexpr (std::is_void_v<R>) {
    f(std::forward<A>(a)...);
    g.leave();
  } else {
    R r = f(std::forward<A>(a)...);
    g.leave();
    return r;
  }
}
}  // namespace detail

// throw_to raises `e` in thread `t` at its next safe point, or at once if
// `t` is blocked interruptibly, and returns once it has been raised (or `t`
// has finished: then it does nothing); throwing to self() throws at once.
// Interruptible while it waits.  Needs a green thread.
template <class E>
void throw_to(thread_id t, E e) {
  detail::throw_to_ptr(t.ref(), std::make_exception_ptr(std::move(e)));
}

// kill_thread is throw_to(t, thread_killed{}).
inline void kill_thread(thread_id t) {
  detail::throw_to_ptr(t.ref(), detail::thread_killed_ptr(), "capstan::kill_thread");
}

// mask_restore, given to mask's function, runs a function with the mask
// state that was in force before that mask (GHC's restore).
class mask_restore {
 public:
  explicit mask_restore(mask_state s) : state_(s) {}
  // operator() runs g() with the earlier mask state and returns its result.
  template <class G>
  auto operator()(G&& g) const {
    mask_state inner = detail::set_mask(state_);
    struct back {
      mask_state s;
      ~back() { detail::set_mask(s); }
    } b{inner};
    detail::check_unmasked();
    return g();
  }
  mask_state state() const { return state_; }

 private:
  mask_state state_;
};

// mask runs f with asynchronous exceptions masked (blocking calls inside
// stay interruptible) and returns its result; if f takes an argument it
// gets a mask_restore (GHC's mask / mask_).
template <class F>
auto mask(F&& f) {
  detail::mask_guard g(mask_state::masked_interruptible);
  if constexpr (std::is_invocable_v<F&, mask_restore>)
    return detail::run_then_leave(g, f, mask_restore(g.previous()));
  else
    return detail::run_then_leave(g, f);
}

// uninterruptible_mask is mask, but blocking calls inside are not
// interrupted either.
template <class F>
auto uninterruptible_mask(F&& f) {
  detail::mask_guard g(mask_state::masked_uninterruptible);
  if constexpr (std::is_invocable_v<F&, mask_restore>)
    return detail::run_then_leave(g, f, mask_restore(g.previous()));
  else
    return detail::run_then_leave(g, f);
}

// get_mask_state returns the calling green thread's mask state.
mask_state get_mask_state();

// state_of tells what thread `t` is doing (GHC's threadStatus): died means
// an exception ended it.
thread_state state_of(thread_id t);

}  // namespace capstan
