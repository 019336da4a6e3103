// parfib: naive Fibonacci with one spark per call above a threshold t
// (nofib/parallel/parfib): pfib n = if n < t then sfib n else
// par(pfib(n-1)) + pfib(n-2).  Below t (and below 2) it is plain sequential
// fib, so t=1 sparks every call.  Measures spark creation, stealing and
// forcing; seq_ms is plain sequential fib(n) in the same process (the best
// of 3, outside the runtime) and ratio = ms / seq_ms.  bare_ms is the same
// recursion with the barest spark an owner-private pool allows (bare_pfib
// below: a push of a pointer, a pop and an indirect call - no accounting,
// no thieves, no exceptions, no result slot), also outside the runtime and
// the best of 3: bare_ratio = bare_ms / seq_ms is what any spark of this
// design costs here, the floor under `ratio` (docs/benchmarks.md, "Sparks").
#include <algorithm>
#include <limits>

#include "bench.hpp"

namespace {
long long sfib(long long n) { return n < 2 ? n : sfib(n - 1) + sfib(n - 2); }

// The bare spark: what is left of capstan's spark (capstan/spark.hpp) when
// everything but the pool is taken away.  One pool, one OS thread.
struct bare_spark {
  long long (*run)(bare_spark*);
  std::uint64_t index;
};
struct bare_pool {
  bare_spark* slots[64];
  std::uint64_t top = 0;
};
bare_pool* g_bare = nullptr;

long long bare_pfib(long long n, long long t) {
  if (n < t || n < 2) return sfib(n);
  struct closure : bare_spark {
    long long n, t;
  } a;
  a.n = n;
  a.t = t;
  a.run = [](bare_spark* b) {
    auto* c = static_cast<closure*>(b);
    return bare_pfib(c->n - 1, c->t);
  };
  bare_pool* p = g_bare;
  a.index = p->top;
  p->slots[p->top++ & 63] = &a;  // depth < 64: no overflow check needed
  long long b = bare_pfib(n - 2, t);
  if (a.index + 1 != p->top) std::abort();  // nobody steals here
  p->top = a.index;
  return a.run(&a) + b;
}

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
  volatile long long vt = t;
  double seq_ms = std::numeric_limits<double>::infinity();
  double bare_ms = std::numeric_limits<double>::infinity();
  bool ok = a.n < 64;  // bare_pool's depth
  bare_pool pool;
  g_bare = &pool;
  for (int rep = 0; rep < 3 && ok; ++rep) {
    std::uint64_t t0 = bench::now_ns();
    long long want = sfib(vn);
    std::uint64_t t1 = bench::now_ns();
    long long bare = bare_pfib(vn, vt);
    std::uint64_t t2 = bench::now_ns();
    seq_ms = std::min(seq_ms, static_cast<double>(t1 - t0) / 1e6);
    bare_ms = std::min(bare_ms, static_cast<double>(t2 - t1) / 1e6);
    ok = got == want && bare == want;
  }
  return bench::report(
      "parfib", a.opts.capabilities, a.n,
      fmt::format("ms={:.3f} seq_ms={:.3f} ratio={:.3f} bare_ratio={:.3f} sparks={}/{}/{}/{}/{}/{}",
                  ms, seq_ms, ms / seq_ms, bare_ms / seq_ms, sp.created, sp.converted,
                  sp.overflowed, sp.dud, sp.gcd, sp.fizzled),
      ok);
}
