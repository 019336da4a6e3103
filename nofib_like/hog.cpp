// hog: one thread computes for <ms> milliseconds without reaching a safe
// point (no runtime call at all), and n short threads forked behind it
// must not wait for it while another capability idles (Note [Stealing from
// a stalled capability]).  At -N1 they must wait: there is nobody else.
// Metrics: last_ms, from the first fork until the last short thread has
// finished; alone_ms, the same n short threads with no hog, in the same
// run (the baseline); hog_ms, how long the hog computed.  Check: every
// short thread ran exactly once, and the first thousandth of the hog's
// loop computed what a plain call of it computes.
#include <atomic>
#include <cstdint>

#include "bench.hpp"

namespace {

// A pure loop the compiler cannot shorten (an LCG whose result is used).
[[gnu::noinline]] std::uint64_t churn(std::uint64_t x, long long iters) {
  for (long long i = 0; i < iters; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

// iterations of churn that take about `ms` here.
long long calibrate(long long ms) {
  long long iters = 1'000'000;
  for (;;) {
    std::uint64_t t0 = bench::now_ns();
    volatile std::uint64_t sink = churn(1, iters);
    (void)sink;
    std::uint64_t dt = bench::now_ns() - t0;
    if (dt >= 20'000'000) return static_cast<long long>(static_cast<double>(iters) * ms * 1e6 / dt);
    iters *= 4;
  }
}

// fork_shorts forks n short threads and waits until all have run; returns
// the ms from the first fork until the last finished, or -1 on a failed check.
double fork_shorts(long long n) {
  std::atomic<long long> ran{0}, sum{0};
  capstan::mvar<std::uint64_t> last;
  std::uint64_t t0 = bench::now_ns();
  for (long long i = 1; i <= n; ++i) {
    capstan::fork_io([&, i] {
      sum.fetch_add(i, std::memory_order_relaxed);
      if (ran.fetch_add(1, std::memory_order_acq_rel) + 1 == n) last.put(bench::now_ns());
    });
  }
  std::uint64_t t1 = last.take();
  if (sum.load() != n * (n + 1) / 2) return -1;
  return static_cast<double>(t1 - t0) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 200);
  long long ms = a.positive(2, 1000, "the hog's milliseconds");
  long long iters = calibrate(ms);
  std::uint64_t expect = churn(7, iters / 1000);  // the check: a thousandth, computed inline
  double last_ms = 0, alone_ms = 0, hog_ms = 0;
  bool ok = capstan::run(a.opts, [&] {
    capstan::mvar<std::uint64_t> hog_result;
    std::uint64_t h0 = bench::now_ns();
    capstan::fork_io([&] {
      std::uint64_t x = churn(7, iters / 1000);  // the thousandth the check compares
      volatile std::uint64_t rest = churn(x, iters - iters / 1000);  // no safe point anywhere
      (void)rest;
      hog_ms = static_cast<double>(bench::now_ns() - h0) / 1e6;
      hog_result.put(x);
    });
    last_ms = fork_shorts(a.n);
    bool hog_ok = hog_result.take() == expect;
    // The baseline after the hog, not before: a burst of forks just before
    // it would have used up the watcher wake-up its stall needs (Note
    // [Stealing from a stalled capability]: one per kWatchWakeGapNs), and
    // the stall would often wait for the ticker (docs/benchmarks.md).
    alone_ms = fork_shorts(a.n);
    return hog_ok && alone_ms >= 0 && last_ms >= 0;
  });
  return bench::report("hog", a.opts.capabilities, a.n,
                       fmt::format("last_ms={:.3f} alone_ms={:.3f} hog_ms={:.1f}", last_ms, alone_ms,
                                   hog_ms),
                       ok);
}
