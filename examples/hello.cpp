// hello.cpp - capstan in one page: options, run, fork_io, mvar, statistics.
//
// Build against an installed capstan:
//   g++ -std=c++20 hello.cpp $(pkg-config --cflags --libs capstan) -o hello
//   ./hello +RTS -N2 -s -RTS
#include <capstan/capstan.hpp>
#include <fmt/format.h>

int main(int argc, char** argv) {
  // Eats +RTS ... -RTS; a bad flag prints the error and the flag summary
  // and exits 1.
  long total = capstan::run(argc, argv, [] {
    constexpr int kWorkers = 1000;
    capstan::mvar<long> results;
    for (int i = 0; i < kWorkers; ++i) {
      capstan::fork_io([&results, i] {
        capstan::label_thread(capstan::self(), "worker");
        results.put(static_cast<long>(i) * i);  // blocks (parks) while the box is full
      });
    }
    long sum = 0;
    for (int i = 0; i < kWorkers; ++i) sum += results.take();
    fmt::print("main thread {} on capability {} of {}\n", capstan::self(),
               capstan::current_capability(), capstan::num_capabilities());
    return sum;
  });
  fmt::print("sum of squares below 1000: {}\n", total);
  return total == 332833500 ? 0 : 1;
}
