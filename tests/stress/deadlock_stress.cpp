// deadlock_stress.cpp - deadlock detection must never fire while the IO
// thread is ending a wait.  Green threads block, one at a time per
// capability, only in waits the IO thread ends (sleeps, timed takes,
// timeout() around an untimed take, timed chan reads), so every capability
// is often idle with one timer pending.  Busy OS threads compete for the
// two cores, so the IO thread is preempted at every point of its wake-up
// path, including between taking a timer off its heap and handing the
// thread back to its capability.  The ticker runs every 100 us with
// detection forced (the busy threads are outside threads).  A detector
// that sees a wait as over before its thread is back in an inbox raises
// blocked_indefinitely in a thread whose timer has fired (Note [Wake-ups
// in flight] in rts/io/io_manager.cpp).
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

TEST_P(DeadlockStress, NeverFiresWhileTheIoThreadEndsAWait) {
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
            switch (r() % 4) {
              case 0: sleep_for(d); break;
              case 1: (void)never.take_for(d); break;
              case 2: (void)timeout(d, [&] { (void)never.take(); }); break;
              default: (void)empty.read_for(d); break;
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
  EXPECT_GT(waits.load(), 100);
}

}  // namespace
