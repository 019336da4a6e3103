// merge_tail.cpp - how much of nofib_like/mergesort is sequential at the
// top?  With the benchmark's data (same LCG, n = 5,000,000), times the
// merge + copy-back that each level of the recursion does last: at level 1
// the whole array's (one merge, nothing else can run beside it), at level
// k one of the 2^(k-1) merges of n / 2^(k-1) elements.  The sum along one
// path is the program's span above the leaves, the time no number of
// capabilities can shorten; level 1 alone bounds the -N2 speed-up by
// Amdahl's law (docs/benchmarks.md, "Spark programs at -N2").  No capstan
// involved.
//   g++ -O2 -o merge_tail nofib_like/experiments/merge_tail.cpp && ./merge_tail
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  constexpr std::size_t n = 5'000'000, cutoff = 10'000;
  std::vector<std::uint32_t> data(n), a, scratch(n);
  std::uint64_t x = 42;  // as mergesort.cpp and its Haskell twin
  for (auto& v : data) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<std::uint32_t>(x >> 32);
  }
  double span = 0;
  int level = 1;
  for (std::size_t m = n; m > cutoff; m /= 2, ++level) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {  // best of 3: the machine is shared
      a.assign(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(m));
      std::size_t h = m / 2;
      std::sort(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(h));
      std::sort(a.begin() + static_cast<std::ptrdiff_t>(h), a.end());
      auto t0 = std::chrono::steady_clock::now();
      std::merge(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(h),
                 a.begin() + static_cast<std::ptrdiff_t>(h), a.end(), scratch.begin());
      std::copy(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(m), a.begin());
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, ms);
    }
    if (!std::is_sorted(a.begin(), a.end())) return 1;
    span += best;
    std::printf("level %2d: merge + copy of %8zu elements %7.2f ms (span so far %.2f ms)\n", level, m,
                best, span);
  }
  return 0;
}
