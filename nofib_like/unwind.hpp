// unwind.hpp - the unwinding floor for the benchmarks that stop blocked
// threads (killblocked, threads007, shutdown): a chain of frames that each
// hold an object with a destructor, ended by a blocking call (the stack of
// a thread that will be killed) or by a throw (the floor: a bare C++
// throw + catch through the same frames, timed in the same program).
#pragma once

#include <capstan/capstan.hpp>

#include <atomic>
#include <cstdint>

#include "bench.hpp"

namespace bench {

// dtor_guard counts its destruction: one per frame unwound.
struct dtor_guard {
  std::atomic<long long>* count;
  ~dtor_guard() { count->fetch_add(1, std::memory_order_relaxed); }
};

// GCC 12 takes the depth-bounded recursion below for an infinite one.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winfinite-recursion"
// descend builds `frames` frames, each with a dtor_guard, and calls
// bottom() in the deepest.
template <class F>
[[gnu::noinline]] void descend(int frames, std::atomic<long long>& dtors, F& bottom) {
  dtor_guard g{&dtors};
  if (frames <= 1)
    bottom();
  else
    descend(frames - 1, dtors, bottom);
  asm volatile("" ::: "memory");  // keeps the frame: no tail call
}
#pragma GCC diagnostic pop

// floor_ns: ns per throw + catch of thread_killed through `frames` frames
// of descend, best of 3 rounds of `reps` (on the calling thread).
inline double floor_ns(int frames, long long reps) {
  std::atomic<long long> dtors{0};
  auto thrower = [] { throw capstan::thread_killed{}; };
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    std::uint64_t t0 = now_ns();
    for (long long i = 0; i < reps; ++i) {
      try {
        descend(frames, dtors, thrower);
      } catch (const capstan::thread_killed&) {
      }
    }
    double ns = static_cast<double>(now_ns() - t0) / static_cast<double>(reps);
    if (ns < best) best = ns;
  }
  return best;
}

}  // namespace bench
