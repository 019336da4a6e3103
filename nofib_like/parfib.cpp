// parfib: naive Fibonacci with one spark per call above a threshold t
// (nofib/parallel/parfib): pfib n = if n < t then sfib n else
// par(pfib(n-1)) + pfib(n-2).  Below t (and below 2) it is plain sequential
// fib, so t=1 sparks every call.  Measures spark creation, stealing and
// forcing; seq_ms is plain sequential fib(n) in the same process (the best
// of 3, outside the runtime) and ratio = ms / seq_ms.
#include <algorithm>
#include <limits>

#include "bench.hpp"

namespace {
long long sfib(long long n) { return n < 2 ? n : sfib(n - 1) + sfib(n - 2); }

long long pfib(long long n, long long t) {
  if (n < t || n < 2) return sfib(n);
  auto a = capstan::par([=] { return pfib(n - 1, t); });
  long long b = pfib(n - 2, t);
  return a.get() + b;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 32);
  long long t = argv[1] && argv[2] ? std::atoll(argv[2]) : 2;  // argv is null-terminated
  if (t <= 0) {
    std::fprintf(stderr, "threshold must be a positive integer, got '%s'\n", argv[2]);
    return 2;
  }
  double ms = 0;
  long long got = capstan::run(a.opts, [&] {
    std::uint64_t t0 = bench::now_ns();
    long long r = pfib(a.n, t);
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
    return r;
  });
  auto sp = capstan::statistics().sparks;
  // Sequential reference: the volatile read keeps the compiler from reusing
  // one call's result for the next.
  volatile long long vn = a.n;
  double seq_ms = std::numeric_limits<double>::infinity();
  bool ok = true;
  for (int rep = 0; rep < 3; ++rep) {
    std::uint64_t t0 = bench::now_ns();
    long long want = sfib(vn);
    seq_ms = std::min(seq_ms, static_cast<double>(bench::now_ns() - t0) / 1e6);
    ok = ok && got == want;
  }
  return bench::report(
      "parfib", a.opts.capabilities, a.n,
      fmt::format("ms={:.3f} seq_ms={:.3f} ratio={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, seq_ms,
                  ms / seq_ms, sp.created, sp.converted, sp.overflowed, sp.dud, sp.gcd,
                  sp.fizzled),
      ok);
}
