// detail/outcome.hpp - the result of calling f: its value or its exception,
// kept to be returned or rethrown later (run, call_in, safe_call and spark
// all call f in one place and hand its outcome back in another).  Not part
// of the API.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace capstan::detail {

// outcome<R> holds what calling an F with invoke_result_t<F&> == R gave:
// nothing yet, a value (void: just "returned"; a reference: the referent's
// address), or an exception.  The value and the exception share a union
// with a one-byte tag: a spark keeps one per fine-grained task and reads
// the tag alone on its fast path (Note [A spark's fast path] in
// capstan/spark.hpp).
template <class R>
class outcome {
  using stored = std::conditional_t<
      std::is_void_v<R>, bool,
      std::conditional_t<std::is_reference_v<R>, std::remove_reference_t<R>*,
                         std::remove_cv_t<R>>>;

 public:
  outcome() noexcept {}
  outcome(const outcome&) = delete;
  outcome& operator=(const outcome&) = delete;
  ~outcome() {
    if constexpr (!std::is_trivially_destructible_v<stored>) {
      if (has_ == kValue || has_ == kTaken) value_.~stored();
    }
    if (has_ == kError) destroy_error();
  }

  // evaluate calls f and keeps its result; f's exception goes on, leaving
  // the outcome empty.  Returns what capture returns for a value.
  template <class F>
  bool evaluate(F& f) {
    if constexpr (std::is_void_v<R>) {
      std::invoke(f);
      ::new (static_cast<void*>(&value_)) stored(true);
    } else if constexpr (std::is_reference_v<R>) {
      ::new (static_cast<void*>(&value_)) stored(std::addressof(static_cast<R>(std::invoke(f))));
    } else {
      ::new (static_cast<void*>(&value_)) stored(std::invoke(f));
    }
    has_ = kValue;
    return std::is_trivially_destructible_v<stored>;
  }

  // capture calls f and keeps its result or its exception; never throws.
  // Returns whether it kept a value that needs no destructor call (the
  // outcome may then be left undestroyed).  Call it once.
  template <class F>
  bool capture(F& f) noexcept {
    try {
      if constexpr (std::is_void_v<R>) {
        std::invoke(f);
        ::new (static_cast<void*>(&value_)) stored(true);
      } else if constexpr (std::is_reference_v<R>) {
        ::new (static_cast<void*>(&value_))
            stored(std::addressof(static_cast<R>(std::invoke(f))));
      } else {
        ::new (static_cast<void*>(&value_)) stored(std::invoke(f));
      }
      has_ = kValue;
      return std::is_trivially_destructible_v<stored>;
    } catch (...) {
      ::new (static_cast<void*>(&error_)) std::exception_ptr(std::current_exception());
      has_ = kError;
      return false;
    }
  }

  bool has_value() const noexcept { return has_ == kValue; }
  // failed tells whether f threw; error is what it threw.
  bool failed() const noexcept { return has_ == kError; }
  // taken tells whether take_value() has moved the value out already.
  bool taken() const noexcept { return has_ == kTaken; }
  const std::exception_ptr& error() const noexcept { return error_; }

  // get returns f's result (moved out) or rethrows its exception.
  R get() {
    if (has_ == kError) std::rethrow_exception(error_);
    return value();
  }

  // value returns f's result (moved out); has_value() must hold.
  R value() {
    if constexpr (std::is_reference_v<R>) {
      return static_cast<R>(*value_);
    } else if constexpr (!std::is_void_v<R>) {
      return std::move(value_);
    }
  }

  // take_value is value() for a holder that may be asked twice (a spark's
  // get()): once the value has moved out it is marked taken, so that
  // has_value() is false and taken() true; the moved-from value is still
  // destroyed with the outcome.  If the move throws, nothing is marked.
  // A void or reference result is never marked: nothing moves, and
  // returning it again is harmless.
  R take_value() {
    if constexpr (std::is_void_v<R> || std::is_reference_v<R>) {
      return value();
    } else {
      R r = value();
      has_ = kTaken;
      return r;
    }
  }

 private:
  // Out of line: inlined into ~outcome, GCC's -Wmaybe-uninitialized took
  // the union's exception_ptr for uninitialized on the value path (a false
  // positive, an error in programs built with -Werror), and the path is
  // cold anyway.
  [[gnu::cold, gnu::noinline]] void destroy_error() noexcept { error_.~exception_ptr(); }

  enum : unsigned char { kNothing, kValue, kError, kTaken };
  union {
    stored value_;
    std::exception_ptr error_;
  };
  unsigned char has_ = kNothing;
};

}  // namespace capstan::detail
