// delay: n green threads each sleep_for 1 ms at once (GHC's threadDelay).
// Measures the IO manager's timers: total ms from the first fork until every
// thread has woken, and the peak RSS.  Check: every thread woke, and none
// slept less than 1 ms.
#include <atomic>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 100'000);
  double ms = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    std::atomic<long long> woke{0};
    std::atomic<long long> early{0};
    capstan::mvar<int> done;
    std::uint64_t t0 = bench::now_ns();
    for (long long i = 0; i < n; ++i) {
      capstan::fork_io([&] {
        std::uint64_t s = bench::now_ns();
        capstan::sleep_for(std::chrono::milliseconds(1));
        if (bench::now_ns() - s < 1'000'000) early.fetch_add(1, std::memory_order_relaxed);
        if (woke.fetch_add(1, std::memory_order_acq_rel) + 1 == n) done.put(1);
      });
    }
    done.take();
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
    return woke.load() == n && early.load() == 0;
  });
  long rss = bench::status_kb("VmHWM:");
  return bench::report("delay", a.opts.capabilities, a.n,
                       fmt::format("ms={:.1f} rss_kb={}", ms, rss), ok);
}
