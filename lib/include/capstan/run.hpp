// run.hpp - starting and stopping the runtime.
#pragma once

#include <exception>
#include <type_traits>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/detail/outcome.hpp"
#include "capstan/options.hpp"

namespace capstan {

// run starts the runtime with `opts`, runs main() as a green thread bound to
// the calling OS thread, reclaims every other thread and stops every
// capability when main returns, and returns main's result or rethrows its
// exception.  One runtime at a time per process.
template <class F>
auto run(const options& opts, F&& main) -> std::invoke_result_t<F&> {
  detail::outcome<std::invoke_result_t<F&>> out;
  auto counted = detail::counting(main);  // for statistics()
  auto body = [&] { out.capture(counted); };
  detail::run_main(&opts, [](void* b) { (*static_cast<decltype(body)*>(b))(); }, &body);
  return out.get();
}

// run(argc, argv, main) is how a program's main() starts the runtime: it
// takes the +RTS ... -RTS flags out of argv (updating argc) with
// options::parse_or_exit - so a bad flag prints the error and the flag
// summary and exits 1, as GHC does - then runs main() as run(opts, main)
// does.  main reads the program's own arguments from argc/argv, e.g. by
// capturing them by reference.
template <class F>
auto run(int& argc, char** argv, F&& main) -> std::invoke_result_t<F&> {
  options opts = options::parse_or_exit(argc, argv);
  return run(opts, std::forward<F>(main));
}

}  // namespace capstan
