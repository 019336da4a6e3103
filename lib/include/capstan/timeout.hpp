// timeout.hpp - bounding how long a function may run (System.Timeout).
#pragma once

#include <chrono>
#include <optional>
#include <type_traits>
#include <utility>

#include "capstan/detail/async_core.hpp"
#include "capstan/errors.hpp"
#include "capstan/detail/duration.hpp"
#include "capstan/detail/mvar_core.hpp"

namespace capstan {

// timeout runs f() and returns its result (true for a void f), or nullopt
// (false) if `d` elapsed first: then f was interrupted by a timeout_expired
// exception that timeout itself catches.  Nested timeouts work; d <= 0
// returns nullopt without running f.  Needs a green thread (usage_error
// otherwise, whatever d); a safe point.  The time-out is raised as an
// asynchronous exception (mask applies), at once if f is blocked, else at
// its next safe point - for a thread that computes without blocking, at
// the first timeslice boundary (+RTS -C) after the deadline.
template <class Rep, class Period, class F>
auto timeout(std::chrono::duration<Rep, Period> d, F&& f) {
  using R = std::invoke_result_t<F&>;
  // A function returning a reference yields a copy (std::optional holds no
  // references).
  using Out = std::conditional_t<std::is_void_v<R>, bool, std::optional<std::remove_cvref_t<R>>>;
  long long ns = detail::to_ns(d);
  if (ns <= 0) {
    // Misuse shows whatever the duration (a usage_error off a green thread).
    detail::mvar_core::blocking_point("capstan::timeout");
    return Out{};
  }
  detail::timeout_frame frame;
  detail::timeout_push(frame, ns);
  struct pop {
    detail::timeout_frame& f;
    ~pop() { detail::timeout_pop(f); }
  };
  try {
    pop p{frame};
    if constexpr (std::is_void_v<R>) {
      f();
      return Out{true};
    } else {
      return Out{f()};
    }
  } catch (const timeout_expired& e) {
    if (e.thread != frame.thread || e.token != frame.token) throw;  // an outer one's
    return Out{};
  }
}

}  // namespace capstan
