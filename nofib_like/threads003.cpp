// threads003: 500 threads in a line, each taking a value from the mvar on
// its left and putting value + 1 into the one on its right; a pump feeds n
// values in at one end and main takes them out at the other (GHC's
// threads003).  ns_per_hop = elapsed / (n * 500).  Baseline base_ns: per
// hop through a line of one thread, in the same run (50 n values: a tenth
// of the hops, since GHC's -N2 twin pays an OS wake-up on each).
#include <memory>

#include "bench.hpp"

namespace {

// line pushes n values through `len` threads; returns ns per hop, and
// whether every value came out as it went in plus len.
double line(long long n, int len, bool* ok) {
  auto ms = std::make_unique<capstan::mvar<long long>[]>(static_cast<std::size_t>(len) + 1);
  std::uint64_t t0 = bench::now_ns();
  for (int i = 0; i < len; ++i)
    capstan::fork_io([n, in = &ms[static_cast<std::size_t>(i)], out = &ms[static_cast<std::size_t>(i) + 1]] {
      for (long long k = 0; k < n; ++k) out->put(in->take() + 1);
    });
  capstan::fork_io([n, in = &ms[0]] {
    for (long long k = 0; k < n; ++k) in->put(k);
  });
  auto& out = ms[static_cast<std::size_t>(len)];
  bool good = true;
  for (long long k = 0; k < n; ++k) good = good && out.take() == k + len;
  *ok = *ok && good;
  return static_cast<double>(bench::now_ns() - t0) / (static_cast<double>(n) * len);
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 20'000);
  constexpr int kLen = 500;
  double ns = 0, base = 0;
  bool ok = capstan::run(a.opts, [&] {
    bool good = true;
    ns = line(a.n, kLen, &good);
    base = line(a.n * kLen / 10, 1, &good);
    return good;
  });
  return bench::report("threads003", a.opts.capabilities, a.n,
                       fmt::format("ns_per_hop={:.2f} base_ns={:.2f}", ns, base), ok);
}
