// deadlock_stress.cpp - deadlock detection must never fire while a wake-up
// is on its way.  Green threads block, one at a time per capability, only
// in waits the IO thread ends (sleeps, timed takes, timeout() around an
// untimed take, timed chan reads, a readable pipe, a close_fd) or that
// their own spark ends (a take of what the spark puts, which an idle
// capability starts), so every capability is often idle with one wake-up
// on its way.  Busy OS threads compete for the two cores, so the IO thread
// and the capabilities' OS threads are preempted at every point of those
// paths, including between taking a timer off the heap and handing the
// thread back to its capability.  The ticker runs every 100 us with
// detection forced (the busy threads are outside threads).  A detector
// that sees a wait as over before its thread is back in an inbox raises
// blocked_indefinitely in a thread whose timer has fired (Note [Wake-ups
// in flight] in rts/io/wake_ups.cpp); one that counts a capability still
// starting a spark as quiet raises it in the spark's maker (Note [Idle is
// not asleep] in rts/exception/deadlock.cpp).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "capstan/capstan.hpp"
#include "stress.hpp"

namespace {

using namespace capstan;
using namespace std::chrono_literals;

class DeadlockStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, DeadlockStress, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

std::atomic<std::uint64_t> next_seed{0};

TEST_P(DeadlockStress, NeverFiresWhileAWakeUpIsOnItsWay) {
  stress::Watchdog dog(std::chrono::seconds(120), "deadlock detection against IO wake-ups");
  std::atomic<bool> stop_hogs{false};
  std::vector<std::thread> hogs;
  for (int i = 0; i < 3; ++i)
    hogs.emplace_back([&] {
      while (!stop_hogs.load(std::memory_order_relaxed)) capstan_test::busy_work(200);
    });
  options o = capstan_test::opts(GetParam(), 100us);
  o.deadlock_detection = options::deadlock::force;
  std::atomic<int> false_alarms{0}, waits{0}, finished{0};
  const unsigned kThreads = GetParam();  // about one blocked thread per capability
  const auto kFor = std::chrono::milliseconds(1500);
  capstan::run(o, [&] {
    mvar<int> done;
    const auto until = std::chrono::steady_clock::now() + kFor;
    for (unsigned k = 0; k < kThreads; ++k) {
      fork_io([&] {
        std::mt19937_64 r(stress::seed() + next_seed.fetch_add(1));
        mvar<int> never;  // nobody puts: only the IO thread ends these waits
        chan<int> empty;
        while (std::chrono::steady_clock::now() < until) {
          auto d = std::chrono::microseconds(5 + r() % 150);
          try {
            switch (r() % 6) {
              case 0: sleep_for(d); break;
              case 1: (void)never.take_for(d); break;
              case 2: (void)timeout(d, [&] { (void)never.take(); }); break;
              case 3: (void)empty.read_for(d); break;
              case 4: {  // a pipe made readable, and closed, through the IO thread
                int fds[2];
                if (::pipe(fds) != 0) break;
                if (::write(fds[1], "x", 1) == 1) wait_readable(fds[0]);
                close_fd(fds[0]);
                ::close(fds[1]);
                break;
              }
              default: {  // our own spark fills the box: an idle capability starts it
                mvar<int> box;
                auto s = par([&] {
                  box.put(1);
                  return 1;
                });
                (void)box.take();
                (void)s.get();
                break;
              }
            }
            waits.fetch_add(1, std::memory_order_relaxed);
          } catch (const blocked_indefinitely&) {
            false_alarms.fetch_add(1);
          }
        }
        finished.fetch_add(1);
        done.put(1);
      });
    }
    // main waits untimed, as a program's main would: only the workers'
    // timers keep the run from being quiet.
    for (unsigned k = 0; k < kThreads;) {
      try {
        done.take();
        ++k;
      } catch (const blocked_indefinitely&) {
        false_alarms.fetch_add(1);
      }
    }
  });
  stop_hogs = true;
  for (auto& h : hogs) h.join();
  EXPECT_EQ(false_alarms.load(), 0);
  EXPECT_EQ(finished.load(), static_cast<int>(kThreads));
  // That the loops ran at all: a floor, not a rate.  Under ThreadSanitizer
  // with the three hogs on two cores a run managed 96 waits at -N2 (a
  // hundred or more was asked, and failed); a quiet release run does
  // thousands.
  EXPECT_GE(waits.load(), static_cast<int>(10 * kThreads));
}

}  // namespace
