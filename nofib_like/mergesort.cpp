// mergesort: sort n pseudo-random 32-bit ints (fixed seed).  Above the
// cutoff the left half's sort is a spark while the caller sorts the right
// half, then the halves are merged into a scratch buffer and copied back;
// at or below it, std::sort.  Check: equal to std::sort of a copy (which
// also proves sortedness and permutation), computed outside the timed region.
#include <algorithm>
#include <vector>

#include "bench.hpp"

namespace {
using elem = std::uint32_t;

void msort(elem* a, elem* scratch, std::size_t n, std::size_t cutoff) {
  if (n <= cutoff || n < 2) {
    std::sort(a, a + n);
    return;
  }
  std::size_t h = n / 2;
  auto left = capstan::par([=] { msort(a, scratch, h, cutoff); });
  msort(a + h, scratch + h, n - h, cutoff);
  left.get();
  std::merge(a, a + h, a + h, a + n, scratch);
  std::copy(scratch, scratch + n, a);
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 5'000'000);
  long long cutoff = argv[1] && argv[2] ? std::atoll(argv[2]) : 10'000;  // argv is null-terminated
  if (cutoff <= 0) {
    std::fprintf(stderr, "cutoff must be a positive integer, got '%s'\n", argv[2]);
    return 2;
  }
  auto n = static_cast<std::size_t>(a.n);
  std::vector<elem> data(n), scratch(n);
  std::uint64_t x = 42;  // 64-bit LCG, top 32 bits (same as the Haskell twin)
  for (auto& v : data) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<elem>(x >> 32);
  }
  std::vector<elem> want = data;
  std::sort(want.begin(), want.end());
  double ms = 0;
  capstan::run(a.opts, [&] {
    std::uint64_t t0 = bench::now_ns();
    msort(data.data(), scratch.data(), n, static_cast<std::size_t>(cutoff));
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
  });
  auto sp = capstan::statistics().sparks;
  return bench::report("mergesort", a.opts.capabilities, a.n,
                       fmt::format("ms={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, sp.created,
                                   sp.converted, sp.overflowed, sp.dud, sp.gcd, sp.fizzled),
                       data == want);
}
