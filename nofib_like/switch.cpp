// switch: two green threads on one capability yield() to each other n times.
// Measures the one-way hand-off of yield, scheduler included.
#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 10'000'000);
  double ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n, count[2] = {0, 0}, alternations = 0;
    int last = -1;
    capstan::mvar<int> done;
    auto body = [&](int me) {
      for (long long i = 0; i < n; ++i) {
        if (last != me) ++alternations;
        last = me;
        ++count[me];
        capstan::yield();
      }
      done.put(me);
    };
    std::uint64_t t0 = bench::now_ns();
    capstan::fork_on(0, [&] { body(0); });
    capstan::fork_on(0, [&] { body(1); });
    done.take();
    done.take();
    ns = static_cast<double>(bench::now_ns() - t0) / (2.0 * static_cast<double>(n));
    // Strict alternation: every iteration follows the other thread's.
    return count[0] == n && count[1] == n && alternations >= 2 * n - 1;
  });
  return bench::report("switch", a.opts.capabilities, a.n, fmt::format("ns_per_switch={:.2f}", ns), ok);
}
