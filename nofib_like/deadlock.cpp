// deadlock: time from the last thread blocking (main, on an mvar nobody
// else can fill, after `threads` others blocked on theirs) to
// blocked_indefinitely arriving in main.  n runs of run(); ms = median,
// max_ms = the slowest.  Check: main got blocked_indefinitely in every run.
#include <algorithm>
#include <memory>
#include <vector>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 10);
  const long long threads = a.positive(2, 100, "threads");
  std::vector<double> ms;
  bool ok = true;
  for (long long r = 0; r < a.n; ++r) {
    double took = -1;
    capstan::run(a.opts, [&] {
      auto boxes = std::make_shared<std::vector<capstan::mvar<int>>>(static_cast<std::size_t>(threads));
      std::vector<capstan::thread_id> ids;
      for (long long i = 0; i < threads; ++i)
        ids.push_back(capstan::fork_io([boxes, i] {
          try {
            (*boxes)[static_cast<std::size_t>(i)].take();
          } catch (const capstan::blocked_indefinitely&) {
          }
        }));
      for (auto id : ids)
        while (capstan::state_of(id) != capstan::thread_state::blocked) capstan::yield();
      capstan::mvar<int> never;
      std::uint64_t t0 = bench::now_ns();
      try {
        never.take();
      } catch (const capstan::blocked_indefinitely&) {
        took = static_cast<double>(bench::now_ns() - t0) / 1e6;
      }
    });
    ok = ok && took >= 0;
    ms.push_back(took);
  }
  std::sort(ms.begin(), ms.end());
  auto s = capstan::statistics();
  ok = ok && s.deadlocks_detected >= 1;
  return bench::report("deadlock", a.opts.capabilities, a.n,
                       fmt::format("ms={:.2f} max_ms={:.2f}", ms[ms.size() / 2], ms.back()), ok);
}
