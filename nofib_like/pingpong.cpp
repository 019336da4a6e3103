// pingpong: two green threads pass a value back and forth through two MVars.
// Measures the one-way MVar hand-off (take blocks, put wakes).
#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 2'000'000);
  double ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    capstan::mvar<long long> ping, pong;
    capstan::mvar<long long> done;
    std::uint64_t t0 = bench::now_ns();
    capstan::fork_io([&] {
      for (long long i = 0; i < n; ++i) {
        ping.put(i);
        pong.take();
      }
      done.put(0);
    });
    capstan::fork_io([&] {
      long long sum = 0;
      for (long long i = 0; i < n; ++i) {
        long long v = ping.take();
        sum += v;
        pong.put(v);
      }
      done.put(sum);
    });
    long long s = done.take() + done.take();
    ns = static_cast<double>(bench::now_ns() - t0) / (2.0 * static_cast<double>(n));
    return s == n * (n - 1) / 2;
  });
  return bench::report("pingpong", a.opts.capabilities, a.n, fmt::format("ns_per_handoff={:.2f}", ns), ok);
}
