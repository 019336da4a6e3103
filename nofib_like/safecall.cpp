// safecall: the cost of a trivial capstan::safe_call over a plain call.
//
//   safecall <n> 1   one green thread calls capstan_bench_nop (ffi_nop.c, a
//                    separate translation unit) n times plainly (GHC's
//                    `unsafe` call) and n times through safe_call.
//                    added_ns = safe_ns - plain_ns, each elapsed / n.
//   safecall <n> T   (T >= 2) throughput scaling: first one green thread
//                    makes n safe calls, then T green threads, one per
//                    capability (fork_on), make n each at the same time.
//                    scaling = (T*n / elapsed_T) / (n / elapsed_1): the
//                    calls/s ratio, higher is better (goal >= 1.8 at -N2).
// Check: the sum of the results equals the same sum computed without calls.
#include <capstan/foreign.hpp>

#include "bench.hpp"

extern "C" int capstan_bench_nop(int x);

namespace {

// The argument of call i: small, so the sum never overflows.
int arg(long long i) { return static_cast<int>(i & 1023); }

long long expected_sum(long long n) {
  long long s = 0;
  for (long long i = 0; i < n; ++i) s += arg(i) + 1;
  return s;
}

long long plain_calls(long long n) {
  long long s = 0;
  for (long long i = 0; i < n; ++i) s += capstan_bench_nop(arg(i));
  return s;
}

long long safe_calls(long long n) {
  long long s = 0;
  for (long long i = 0; i < n; ++i) {
    s += capstan::safe_call([i] { return capstan_bench_nop(arg(i)); });
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 5'000'000);
  long long threads = a.positive(2, 1, "threads");
  std::string metrics;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    long long want = expected_sum(n);
    bool good = safe_calls(n / 10 + 1) == expected_sum(n / 10 + 1);  // warm up (spare Task)
    if (threads == 1) {
      std::uint64_t t0 = bench::now_ns();
      good = plain_calls(n) == want && good;
      std::uint64_t t1 = bench::now_ns();
      good = safe_calls(n) == want && good;
      std::uint64_t t2 = bench::now_ns();
      double plain = static_cast<double>(t1 - t0) / static_cast<double>(n);
      double safe = static_cast<double>(t2 - t1) / static_cast<double>(n);
      metrics = fmt::format("added_ns={:.2f} plain_ns={:.2f} safe_ns={:.2f}", safe - plain, plain,
                            safe);
      return good;
    }
    std::uint64_t t0 = bench::now_ns();
    good = safe_calls(n) == want && good;
    std::uint64_t t1 = bench::now_ns();
    capstan::mvar<long long> done;
    for (long long t = 0; t < threads; ++t) {
      capstan::fork_on(static_cast<unsigned>(t), [&] { done.put(safe_calls(n)); });
    }
    for (long long t = 0; t < threads; ++t) good = done.take() == want && good;
    std::uint64_t t2 = bench::now_ns();
    double one = static_cast<double>(t1 - t0) / static_cast<double>(n);
    double many = static_cast<double>(t2 - t1) / static_cast<double>(threads * n);
    metrics = fmt::format("scaling={:.3f} ns_per_call_1t={:.2f} ns_per_call_{}t={:.2f}", one / many,
                          one, threads, many);
    return good;
  });
  return bench::report("safecall", a.opts.capabilities, a.n, metrics, ok);
}
