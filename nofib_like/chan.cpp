// chan: GHC's smp `chan` benchmark: one writer and one reader pass n items
// through an unbounded chan.  Baseline, in the same invocation: the same n
// items through an mvar (a one-place channel: every item is a hand-off).
#include "bench.hpp"

namespace {

// run_pipe returns ns per item for n items from a writer thread to a
// reader thread through `send`/`recv`, and whether the reader's sum checks.
template <class Send, class Recv>
double run_pipe(long long n, Send send, Recv recv, bool& ok) {
  capstan::mvar<long long> done;
  std::uint64_t t0 = bench::now_ns();
  capstan::fork_io([&] {
    for (long long i = 0; i < n; ++i) send(i);
  });
  capstan::fork_io([&] {
    long long sum = 0;
    for (long long i = 0; i < n; ++i) sum += recv();
    done.put(sum);
  });
  long long s = done.take();
  double ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
  ok = ok && s == n * (n - 1) / 2;
  return ns;
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 10'000'000);
  double chan_ns = 0, mvar_ns = 0;
  bool ok = true;
  capstan::run(a.opts, [&] {
    capstan::chan<long long> c;
    chan_ns = run_pipe(a.n, [&](long long v) { c.write(v); }, [&] { return c.read(); }, ok);
    capstan::mvar<long long> m;
    mvar_ns = run_pipe(a.n, [&](long long v) { m.put(v); }, [&] { return m.take(); }, ok);
  });
  return bench::report("chan", a.opts.capabilities, a.n,
                       fmt::format("items_per_s={:.0f} ns_per_item={:.2f} mvar_items_per_s={:.0f}",
                                   1e9 / chan_ns, chan_ns, 1e9 / mvar_ns),
                       ok);
}
