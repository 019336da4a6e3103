// callback001: T OS threads (std::thread, started from inside a safe_call
// by the main green thread, so created outside the runtime while it runs)
// each make n capstan::call_in in-calls computing 2i+1, all at once; the
// main green thread joins them, still inside the safe_call.
// ns_per_incall = elapsed / (T*n), from before the threads start until all
// have joined (throughput of concurrent in-calls, not one call's latency:
// that is callback002).  Check: the sum of all results is T * n^2.
#include <thread>
#include <vector>

#include <capstan/foreign.hpp>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 10'000);
  long long threads = a.positive(2, 4, "threads");
  double ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    std::vector<long long> sums(static_cast<std::size_t>(threads));
    std::uint64_t elapsed = capstan::safe_call([&] {
      std::uint64_t t0 = bench::now_ns();
      std::vector<std::thread> os;
      for (long long t = 0; t < threads; ++t) {
        os.emplace_back([&sums, n, t] {
          long long s = 0;
          for (long long i = 0; i < n; ++i) s += capstan::call_in([i] { return 2 * i + 1; });
          sums[static_cast<std::size_t>(t)] = s;
        });
      }
      for (auto& th : os) th.join();
      return bench::now_ns() - t0;
    });
    ns = static_cast<double>(elapsed) / static_cast<double>(threads * n);
    bool good = true;
    for (long long s : sums) good = good && s == n * n;
    return good;
  });
  return bench::report("callback001", a.opts.capabilities, a.n,
                       fmt::format("ns_per_incall={:.1f}", ns), ok);
}
