// threads001: fork n green threads that each finish at once (GHC's
// nofib/smp threads001 shape); main waits for the last one.
#include <atomic>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  double ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    std::atomic<long long> left{n};
    capstan::mvar<int> done;
    std::uint64_t t0 = bench::now_ns();
    for (long long i = 0; i < n; ++i) {
      capstan::fork_io([&] {
        if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) done.put(1);
      });
    }
    done.take();
    ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    return left.load() == 0;
  });
  return bench::report("threads001", a.opts.capabilities, a.n,
                       fmt::format("ns_per_thread={:.2f} rss_kb={}", ns, bench::status_kb("VmHWM:")),
                       ok);
}
