// two_cpus.cpp - how often does this machine run two busy OS threads on
// one CPU?  Starts two std::threads that each spin for the time one
// thread takes alone (about 10 ms), 200 times, and prints the spread of
// the pair's wall time: a median near the single time means two CPUs; a
// tail near twice it means the kernel left both on one CPU for a while.
// No capstan involved: it measures the floor under the runtime's -N2
// spread (docs/benchmarks.md, "Spark programs at -N2").
//   g++ -O2 -pthread -o two_cpus nofib_like/experiments/two_cpus.cpp && ./two_cpus
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {
double spin(long n) {
  volatile double x = 0;
  for (long i = 0; i < n; ++i) x = x + 1.0;
  return x;
}
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main() {
  constexpr long kSpin = 3'000'000;
  constexpr int kRuns = 200;
  auto t0 = std::chrono::steady_clock::now();
  spin(kSpin);
  double one = ms_since(t0);
  std::vector<double> pair;
  for (int k = 0; k < kRuns; ++k) {
    auto s = std::chrono::steady_clock::now();
    std::thread a([] { spin(kSpin); }), b([] { spin(kSpin); });
    a.join();
    b.join();
    pair.push_back(ms_since(s));
  }
  std::sort(pair.begin(), pair.end());
  std::printf("one thread %.2f ms; two at once over %d runs: min %.2f median %.2f p90 %.2f p99 %.2f max %.2f ms\n",
              one, kRuns, pair[0], pair[kRuns / 2], pair[kRuns * 9 / 10], pair[kRuns * 99 / 100],
              pair[kRuns - 1]);
}
