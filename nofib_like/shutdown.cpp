// shutdown (and threads007): n threads blocked at exit, each `frames`
// frames deep with a destructor in every frame; main returns and run()
// kills them all (Note [Shutdown] in rts/shutdown/shutdown.cpp).
//   shutdown:   a third each on mvars, sleeps (1 h) and fd waits (pipes
//               that never become readable).
//   threads007: a third each on mvars, chan reads and sleeps (GHC's
//               threads007 shape: threads blocked on MVars and Chans).
// exit_ns = (run() returned - main returned) / n.  floor_ns = a bare throw
// + catch of thread_killed through the same frames, timed in the same
// program before run(); ratio = exit_ns / floor_ns.  Check: every thread
// was killed (statistics: killed == n, none abandoned) and every
// destructor ran.
#include <unistd.h>

#include <memory>
#include <vector>

#include "unwind.hpp"

#ifdef THREADS007
constexpr const char* kName = "threads007";
constexpr int kKinds = 3;
constexpr long long kDefaultN = 20'000;
#else
constexpr const char* kName = "shutdown";
constexpr int kKinds = 3;
constexpr long long kDefaultN = 100'000;
#endif

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, kDefaultN);
  const int frames = static_cast<int>(a.positive(2, 1, "frames"));
  const long long n = a.n;
  const double floor = bench::floor_ns(frames, 100'000);
  // Outlive main: an mvar destroyed under its waiters would orphan them.
  auto ms = std::make_unique<capstan::mvar<int>[]>(static_cast<std::size_t>(n));
  constexpr int kChans = 16;
  auto chans = std::make_unique<capstan::chan<int>[]>(kChans);
  constexpr int kPipes = 16;
  int pipes[kPipes][2];
  for (auto& p : pipes)
    if (pipe(p) != 0) return 2;
  std::atomic<long long> dtors{0};
  std::uint64_t t_main_returned = 0;
  capstan::run(a.opts, [&] {
    std::vector<capstan::thread_id> ids;
    ids.reserve(static_cast<std::size_t>(n));
    for (long long i = 0; i < n; ++i) {
      ids.push_back(capstan::fork_io([&, i] {
        auto bottom = [&, i] {
          switch (i % kKinds) {
            case 0: ms[static_cast<std::size_t>(i)].take(); break;
            case 1: capstan::sleep_for(std::chrono::hours(1)); break;
            default:
#ifdef THREADS007
              chans[static_cast<std::size_t>(i % kChans)].read();
#else
              capstan::wait_readable(pipes[i % kPipes][0]);
#endif
              break;
          }
        };
        bench::descend(frames, dtors, bottom);
      }));
    }
    for (auto id : ids)
      while (capstan::state_of(id) != capstan::thread_state::blocked) capstan::yield();
    t_main_returned = bench::now_ns();
  });
  std::uint64_t t_run_returned = bench::now_ns();
  double exit_ns = static_cast<double>(t_run_returned - t_main_returned) / static_cast<double>(n);
  auto s = capstan::statistics();
  bool ok = s.threads_killed == static_cast<std::uint64_t>(n) && s.threads_abandoned == 0 &&
            dtors.load() == n * frames;
  for (auto& p : pipes) close(p[0]), close(p[1]);
  return bench::report(
      kName, a.opts.capabilities, n,
      fmt::format("exit_ns={:.2f} floor_ns={:.2f} ratio={:.2f} frames={} killed={} abandoned={}",
                  exit_ns, floor, exit_ns / floor, frames, s.threads_killed,
                  s.threads_abandoned),
      ok);
}
