// run.hpp - starting and stopping the runtime.
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/options.hpp"

namespace capstan {

// run starts the runtime with `opts`, runs main() as a green thread bound to
// the calling OS thread, reclaims every other thread and stops every
// capability when main returns, and returns main's result or rethrows its
// exception.  One runtime at a time per process.
template <class F>
auto run(const options& opts, F&& main) -> std::invoke_result_t<F&> {
  using R = std::invoke_result_t<F&>;
  std::exception_ptr error;
  if constexpr (std::is_void_v<R>) {
    auto body = [&] {
      try {
        std::invoke(main);
      } catch (...) {
        error = std::current_exception();
      }
    };
    detail::run_main(&opts, [](void* b) { (*static_cast<decltype(body)*>(b))(); }, &body);
    if (error) std::rethrow_exception(error);
  } else {
    std::optional<R> result;
    auto body = [&] {
      try {
        result.emplace(std::invoke(main));
      } catch (...) {
        error = std::current_exception();
      }
    };
    detail::run_main(&opts, [](void* b) { (*static_cast<decltype(body)*>(b))(); }, &body);
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }
}

}  // namespace capstan
