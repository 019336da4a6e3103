// balanced / imbalanced: one origin thread sparks n independent tasks (a
// dependent 64-bit LCG chain, ~100 us each), then forces them in order.
// Built twice (nofib_like/meson.build): with -DIMBALANCED every 10th task is
// 10x heavier.
// Idle capabilities take the sparks.  Check: the sum of the results equals
// a sequential run outside the timed region.
#include <memory>
#include <vector>

#include "bench.hpp"

namespace {
constexpr long kIters = 60'000;  // ~100 us per task; same constant in the Haskell twin

#ifdef IMBALANCED
constexpr const char* kName = "imbalanced";
long iters_of(long long i) { return i % 10 == 0 ? 10 * kIters : kIters; }
#else
constexpr const char* kName = "balanced";
long iters_of(long long) { return kIters; }
#endif

std::uint64_t task(long long i) {
  std::uint64_t x = static_cast<std::uint64_t>(i);
  for (long k = iters_of(i); k > 0; --k) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x >> 33;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1024);
  double ms = 0;
  std::uint64_t got = capstan::run(a.opts, [&] {
    std::vector<std::unique_ptr<capstan::spark<std::uint64_t>>> sparks;
    sparks.reserve(static_cast<std::size_t>(a.n));
    std::uint64_t t0 = bench::now_ns();
    // new T(prvalue) initialises in place: sparks need not be movable.
    for (long long i = 0; i < a.n; ++i)
      sparks.emplace_back(new capstan::spark<std::uint64_t>(capstan::par([i] { return task(i); })));
    std::uint64_t sum = 0;
    for (auto& s : sparks) sum += s->get();
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
    return sum;
  });
  auto sp = capstan::statistics().sparks;
  std::uint64_t want = 0;
  for (long long i = 0; i < a.n; ++i) want += task(i);
  return bench::report(kName, a.opts.capabilities, a.n,
                       fmt::format("ms={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, sp.created,
                                   sp.converted, sp.overflowed, sp.dud, sp.gcd, sp.fizzled),
                       got == want);
}
