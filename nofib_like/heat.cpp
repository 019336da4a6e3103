// heat: 2-D Jacobi heat diffusion on an n x n grid of 20-bit fixed-point
// cells (fixed-seed LCG start, fixed edges), double-buffered, for `steps`
// steps.  Each step splits the rows into 16 strips, one spark per strip,
// and forces them all before the next step.  Persistent imbalance: a cell
// in the middle third of the rows is relaxed 4 times against its old
// neighbours (x = (4x + up + down + left + right) / 8, repeated), elsewhere
// once, so the middle strips do ~4x the work.  Integer arithmetic: the
// check is exact equality with a sequential (one-strip) run outside the
// timed region.
#include <memory>
#include <vector>

#include "bench.hpp"

namespace {
constexpr long long kStrips = 16;  // same constant in the Haskell twin
using grid = std::vector<std::uint32_t>;

// Rows [lo, hi) of dst from src; rows 0 and n-1 and columns 0 and n-1 stay.
void relax_rows(const grid& src, grid& dst, long long n, long long lo, long long hi) {
  for (long long i = lo < 1 ? 1 : lo; i < hi && i < n - 1; ++i) {
    int reps = 3 * i >= n && 3 * i < 2 * n ? 4 : 1;
    const std::uint32_t *up = &src[(i - 1) * n], *mid = &src[i * n], *dn = &src[(i + 1) * n];
    std::uint32_t* out = &dst[i * n];
    for (long long j = 1; j < n - 1; ++j) {
      std::uint32_t x = mid[j], s = up[j] + dn[j] + mid[j - 1] + mid[j + 1];
      for (int r = 0; r < reps; ++r) x = (4 * x + s) >> 3;
      out[j] = x;
    }
  }
}

grid initial(long long n) {
  grid g(static_cast<std::size_t>(n * n));
  std::uint64_t x = 42;  // 64-bit LCG, bits 40..59 (same as the Haskell twin)
  for (auto& v : g) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<std::uint32_t>(x >> 40) & 0xFFFFF;
  }
  return g;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 512);
  long long steps = argv[1] && argv[2] ? std::atoll(argv[2]) : 400;  // argv is null-terminated
  if (steps <= 0 || a.n < 3) {
    std::fprintf(stderr, "usage: heat [n>=3] [steps>0]\n");
    return 2;
  }
  long long n = a.n;
  grid cur = initial(n), next = cur;
  double ms = 0;
  capstan::run(a.opts, [&] {
    std::uint64_t t0 = bench::now_ns();
    for (long long t = 0; t < steps; ++t) {
      std::vector<std::unique_ptr<capstan::spark<void>>> strips;
      // new T(prvalue) initialises in place: sparks need not be movable.
      for (long long s = 0; s < kStrips; ++s)
        strips.emplace_back(new capstan::spark<void>(capstan::par([&, s] {
          relax_rows(cur, next, n, s * n / kStrips, (s + 1) * n / kStrips);
        })));
      for (auto& s : strips) s->get();
      cur.swap(next);
    }
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
  });
  auto sp = capstan::statistics().sparks;
  grid want = initial(n), tmp = want;
  for (long long t = 0; t < steps; ++t) {
    relax_rows(want, tmp, n, 0, n);
    want.swap(tmp);
  }
  return bench::report("heat", a.opts.capabilities, a.n,
                       fmt::format("ms={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, sp.created,
                                   sp.converted, sp.overflowed, sp.dud, sp.gcd, sp.fizzled),
                       cur == want);
}
