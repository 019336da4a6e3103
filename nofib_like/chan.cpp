// chan: GHC's smp `chan` benchmark: one writer and one reader pass n items
// through an unbounded chan.  Baseline, in the same invocation: n/10 items
// through an mvar (a one-place channel: every item is a hand-off; a tenth,
// since GHC's -N2 twin pays an OS wake-up per item there), per item.
// With two or more capabilities it also reports split_items_per_s: the
// chan with the writer on capability 0 and the reader on capability 1
// (fork_on), where every item crosses between cores; forkIO, as in GHC's
// program, leaves both on the forking capability unless work is stolen.
#include <algorithm>

#include "bench.hpp"

namespace {

// run_pipe returns ns per item for n items from a writer thread to a
// reader thread through `send`/`recv`, and whether the reader's sum checks.
// split: writer on capability 0, reader on capability 1.
template <class Send, class Recv>
double run_pipe(long long n, Send send, Recv recv, bool& ok, bool split = false) {
  capstan::mvar<long long> done;
  std::uint64_t t0 = bench::now_ns();
  auto fork = [split](unsigned cap, auto f) {
    if (split) capstan::fork_on(cap, f); else capstan::fork_io(f);
  };
  fork(0, [&] {
    for (long long i = 0; i < n; ++i) send(i);
  });
  fork(1, [&] {
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
  double chan_ns = 0, mvar_ns = 0, split_ns = 0;
  bool ok = true;
  capstan::run(a.opts, [&] {
    capstan::chan<long long> c;
    chan_ns = run_pipe(a.n, [&](long long v) { c.write(v); }, [&] { return c.read(); }, ok);
    capstan::mvar<long long> m;
    mvar_ns = run_pipe(std::max(1LL, a.n / 10), [&](long long v) { m.put(v); }, [&] { return m.take(); }, ok);
    if (capstan::num_capabilities() > 1) {
      capstan::chan<long long> s;
      split_ns = run_pipe(a.n, [&](long long v) { s.write(v); }, [&] { return s.read(); }, ok, true);
    }
  });
  std::string split = split_ns > 0 ? fmt::format("{:.0f}", 1e9 / split_ns) : "na";
  return bench::report("chan", a.opts.capabilities, a.n,
                       fmt::format("items_per_s={:.0f} ns_per_item={:.2f} mvar_items_per_s={:.0f} "
                                   "split_items_per_s={}",
                                   1e9 / chan_ns, chan_ns, 1e9 / mvar_ns, split),
                       ok);
}
