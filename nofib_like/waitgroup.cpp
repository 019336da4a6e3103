// waitgroup: fork n green threads that each call done() on a wait_group,
// and wait (ns_per_thread); in the same run, threads001's shape - the
// same forks counting down an atomic, the last one putting an mvar
// (threads001_ns_per_thread).  Check: on both sides every thread ran
// before the wait returned (each marks its own byte, a plain store, so
// the check costs both sides the same and adds no locked instruction).
#include <algorithm>
#include <atomic>
#include <vector>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 100'000);
  long long n = a.n;
  double wg_ns = 0, t1_ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    bool all_ran = true;
    std::vector<char> ran(static_cast<std::size_t>(n));
    auto every_thread_ran = [&] {
      bool all = std::all_of(ran.begin(), ran.end(), [](char c) { return c == 1; });
      std::fill(ran.begin(), ran.end(), 0);
      return all;
    };
    for (int rep = 0; rep < 2; ++rep) {  // rep 0 warms the thread slabs and stacks
      std::uint64_t t0 = bench::now_ns();
      capstan::wait_group wg(n);
      for (long long i = 0; i < n; ++i)
        capstan::fork_io([&, i] {
          ran[static_cast<std::size_t>(i)] = 1;
          wg.done();
        });
      wg.wait();
      wg_ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
      all_ran = every_thread_ran() && all_ran;

      t0 = bench::now_ns();
      std::atomic<long long> left{n};
      capstan::mvar<int> done;
      for (long long i = 0; i < n; ++i)
        capstan::fork_io([&, i] {
          ran[static_cast<std::size_t>(i)] = 1;
          if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) done.put(1);
        });
      done.take();
      t1_ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
      all_ran = every_thread_ran() && all_ran;
    }
    return all_ran;
  });
  return bench::report("waitgroup", a.opts.capabilities, a.n,
                       fmt::format("ns_per_thread={:.2f} threads001_ns_per_thread={:.2f}", wg_ns, t1_ns), ok);
}
