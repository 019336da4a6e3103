// parked: n green threads each block on their own MVar; we measure the
// resident memory they add, then release them all.
#include <atomic>
#include <vector>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  double per_thread = 0, release_ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    std::atomic<long long> parked{0}, finished{0};
    std::vector<capstan::mvar<int>> boxes(static_cast<std::size_t>(n));
    capstan::mvar<int> done;
    long before = bench::status_kb("VmRSS:");
    for (long long i = 0; i < n; ++i) {
      capstan::fork_io([&, i] {
        parked.fetch_add(1, std::memory_order_relaxed);
        int v = boxes[static_cast<std::size_t>(i)].take();
        if (finished.fetch_add(v, std::memory_order_acq_rel) + v == n) done.put(1);
      });
    }
    // Threads increment `parked` right before blocking; once all have and
    // the other capabilities are idle again, every thread is parked.
    while (parked.load() < n) capstan::yield();
    for (int i = 0; i < 100; ++i) capstan::yield();
    long after = bench::status_kb("VmRSS:");
    per_thread = static_cast<double>(after - before) * 1024.0 / static_cast<double>(n);
    std::uint64_t t0 = bench::now_ns();
    for (auto& b : boxes) b.put(1);
    done.take();
    release_ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    return finished.load() == n;
  });
  return bench::report("parked", a.opts.capabilities, a.n,
                       fmt::format("bytes_per_thread={:.0f} ns_per_release={:.2f} rss_kb={}",
                                   per_thread, release_ns, bench::status_kb("VmHWM:")),
                       ok);
}
