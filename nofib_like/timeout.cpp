// timeout: the cost of timeout() around an action that finishes at once
// (ns_per_timeout; baseline base_ns = the same action called plainly, in
// the same run), and how late a 1 ms timeout around a take that never
// completes returns (expire_median_us / expire_p90_us over `expiries`
// runs, default 200).
#include <algorithm>
#include <vector>

#include "bench.hpp"

namespace {
[[gnu::noinline]] long long action(long long* x) { return ++*x; }
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  const long long expiries = a.positive(2, 200, "expiries");
  double ns = 0, base = 0, median_us = 0, p90_us = 0;
  bool ok = capstan::run(a.opts, [&] {
    const long long n = a.n;
    long long x = 0, sum = 0;
    std::uint64_t t0 = bench::now_ns();
    for (long long i = 0; i < n; ++i) sum += action(&x);
    base = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    long long got = 0;
    t0 = bench::now_ns();
    for (long long i = 0; i < n; ++i)
      got += *capstan::timeout(std::chrono::hours(1), [&] { return action(&x); });
    ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    bool good = got == sum + n * n;  // x went on from n: n + 1 .. 2n
    capstan::mvar<int> never;
    std::vector<double> us;
    for (long long i = 0; i < expiries; ++i) {
      std::uint64_t s = bench::now_ns();
      bool finished = capstan::timeout(std::chrono::milliseconds(1), [&] { never.take(); });
      us.push_back(static_cast<double>(bench::now_ns() - s) / 1000.0);
      good = good && !finished;
    }
    std::sort(us.begin(), us.end());
    median_us = us[us.size() / 2];
    p90_us = us[us.size() * 9 / 10];
    return good && median_us >= 1000.0;
  });
  return bench::report("timeout", a.opts.capabilities, a.n,
                       fmt::format("ns_per_timeout={:.2f} base_ns={:.2f} expire_median_us={:.1f} "
                                   "expire_p90_us={:.1f}",
                                   ns, base, median_us, p90_us),
                       ok);
}
