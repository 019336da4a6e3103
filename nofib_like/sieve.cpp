// sieve: count the primes below n with a segmented sieve of Eratosthenes.
// The base primes up to sqrt(n) are sieved sequentially, then one spark per
// 64 KiB segment (a byte per number) crosses out their multiples in that
// segment and counts what is left; the counts are summed in order.  Check:
// equal to a plain sequential sieve outside the timed region (pi(2,000,000)
// = 148933).
#include <algorithm>
#include <memory>
#include <vector>

#include "bench.hpp"

namespace {
constexpr long long kSegment = 64 * 1024;  // numbers per segment; same in the Haskell twin

// Plain sieve: flags[i] is 1 iff i < n is prime.
std::vector<char> sieve_flags(long long n) {
  std::vector<char> flags(static_cast<std::size_t>(n), 1);
  for (long long i = 0; i < n && i < 2; ++i) flags[i] = 0;
  for (long long p = 2; p * p < n; ++p)
    if (flags[p])
      for (long long m = p * p; m < n; m += p) flags[m] = 0;
  return flags;
}

// Primes in [lo, hi), crossed out by the base primes (all primes p with p*p < hi).
long long count_segment(const std::vector<long long>& base, long long lo, long long hi) {
  std::vector<char> seg(static_cast<std::size_t>(hi - lo), 1);
  for (long long p : base) {
    if (p * p >= hi) break;
    for (long long m = std::max(p * p, (lo + p - 1) / p * p); m < hi; m += p) seg[m - lo] = 0;
  }
  long long count = 0;
  for (long long i = std::max(lo, 2LL); i < hi; ++i) count += seg[i - lo];
  return count;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 2'000'000);
  long long n = a.n;
  double ms = 0;
  long long got = capstan::run(a.opts, [&] {
    std::uint64_t t0 = bench::now_ns();
    long long root = 1;
    while (root * root < n) ++root;  // base primes: those below root (p*p < n implies p < root)
    std::vector<char> small = sieve_flags(root);
    std::vector<long long> base;
    for (long long p = 2; p < root; ++p)
      if (small[p]) base.push_back(p);
    std::vector<std::unique_ptr<capstan::spark<long long>>> segs;
    // new T(prvalue) initialises in place: sparks need not be movable.
    for (long long lo = 0; lo < n; lo += kSegment)
      segs.emplace_back(new capstan::spark<long long>(capstan::par(
          [&base, lo, n] { return count_segment(base, lo, std::min(n, lo + kSegment)); })));
    long long sum = 0;
    for (auto& s : segs) sum += s->get();
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
    return sum;
  });
  auto sp = capstan::statistics().sparks;
  std::vector<char> flags = sieve_flags(n);
  long long want = 0;
  for (char f : flags) want += f;
  return bench::report("sieve", a.opts.capabilities, a.n,
                       fmt::format("ms={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, sp.created,
                                   sp.converted, sp.overflowed, sp.dud, sp.gcd, sp.fizzled),
                       got == want);
}
