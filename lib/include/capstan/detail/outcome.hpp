// detail/outcome.hpp - the result of calling f: its value or its exception,
// kept to be returned or rethrown later (run, call_in, safe_call and spark
// all call f in one place and hand its outcome back in another).  Not part
// of the API.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace capstan::detail {

// outcome<R> holds what calling an F with invoke_result_t<F&> == R gave:
// nothing yet, a value (void: just "returned"; a reference: the referent's
// address), or an exception.
template <class R>
class outcome {
  using stored = std::conditional_t<
      std::is_void_v<R>, bool,
      std::conditional_t<std::is_reference_v<R>, std::remove_reference_t<R>*, R>>;

 public:
  // capture calls f and keeps its result or its exception; never throws.
  template <class F>
  void capture(F& f) noexcept {
    try {
      if constexpr (std::is_void_v<R>) {
        std::invoke(f);
        value_.emplace(true);
      } else if constexpr (std::is_reference_v<R>) {
        value_.emplace(std::addressof(static_cast<R>(std::invoke(f))));
      } else {
        value_.emplace(std::invoke(f));
      }
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  // failed tells whether f threw.
  bool failed() const noexcept { return error_ != nullptr; }

  // get returns f's result (moved out) or rethrows its exception; once.
  R get() {
    if (error_) std::rethrow_exception(error_);
    if constexpr (std::is_reference_v<R>) {
      return static_cast<R>(**value_);
    } else if constexpr (!std::is_void_v<R>) {
      return std::move(*value_);
    }
  }

 private:
  std::exception_ptr error_;
  std::optional<stored> value_;
};

}  // namespace capstan::detail
