// nqueens: count all solutions of the n-queens problem (bitmask search).
// Every candidate placement in the first d rows is a spark; below row d the
// search is sequential.  A node sparks all its children, then forces them
// in order.  Check: the known solution counts.
#include <map>
#include <memory>
#include <vector>

#include "bench.hpp"

namespace {
using mask = std::uint64_t;

long long seq_count(int n, int row, mask cols, mask ld, mask rd) {
  if (row == n) return 1;
  mask full = (mask{1} << n) - 1, avail = full & ~(cols | ld | rd);
  long long count = 0;
  for (; avail != 0; avail &= avail - 1) {
    mask b = avail & -avail;
    count += seq_count(n, row + 1, cols | b, ((ld | b) << 1) & full, (rd | b) >> 1);
  }
  return count;
}

long long par_count(int n, int d, int row, mask cols, mask ld, mask rd) {
  if (row >= d || row == n) return seq_count(n, row, cols, ld, rd);
  mask full = (mask{1} << n) - 1, avail = full & ~(cols | ld | rd);
  std::vector<std::unique_ptr<capstan::spark<long long>>> kids;
  for (; avail != 0; avail &= avail - 1) {
    mask b = avail & -avail;
    mask c = cols | b, l = ((ld | b) << 1) & full, r = (rd | b) >> 1;
    // new T(prvalue) initialises in place: sparks need not be movable.
    kids.emplace_back(new capstan::spark<long long>(
        capstan::par([=] { return par_count(n, d, row + 1, c, l, r); })));
  }
  long long count = 0;
  for (auto& k : kids) count += k->get();
  return count;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 12);
  long long d = argv[1] && argv[2] ? std::atoll(argv[2]) : 3;  // argv is null-terminated
  if (d <= 0 || a.n > 30) {
    std::fprintf(stderr, "usage: nqueens [n<=30] [spark depth>0]\n");
    return 2;
  }
  int n = static_cast<int>(a.n);
  double ms = 0;
  long long got = capstan::run(a.opts, [&] {
    std::uint64_t t0 = bench::now_ns();
    long long r = par_count(n, static_cast<int>(d), 0, 0, 0, 0);
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
    return r;
  });
  auto sp = capstan::statistics().sparks;
  const std::map<int, long long> known{{1, 1},       {4, 2},       {5, 10},     {6, 4},
                                       {7, 40},      {8, 92},      {9, 352},    {10, 724},
                                       {11, 2680},   {12, 14200},  {13, 73712}, {14, 365596}};
  auto it = known.find(n);
  // Sizes without a tabulated count are checked against the sequential search.
  long long want = it != known.end() ? it->second : seq_count(n, 0, 0, 0, 0);
  return bench::report("nqueens", a.opts.capabilities, a.n,
                       fmt::format("ms={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, sp.created,
                                   sp.converted, sp.overflowed, sp.dud, sp.gcd, sp.fizzled),
                       got == want);
}
