// steal_test.cpp - Note [Stealing from a stalled capability]: a thread that
// never reaches a safe point does not hold the threads queued behind it
// hostage while another capability idles.
#include <atomic>
#include <chrono>

#include "capstan_test.hpp"

namespace {

using namespace std::chrono_literals;

// hog spins without any runtime call until `until` holds or the guard
// passes; returns whether `until` held (the threads behind it got to run
// elsewhere).  No yield, no yield_point: only a steal can rescue them.
template <class Pred>
bool hog(Pred until) {
  auto end = std::chrono::steady_clock::now() + capstan_test::kWaitGuard;
  while (!until())
    if (std::chrono::steady_clock::now() > end) return false;
  return true;
}

std::uint64_t threads_stolen() {
  std::uint64_t n = 0;
  for (const auto& c : capstan::statistics().capabilities) n += c.threads_stolen;
  return n;
}

class Steal : public capstan_test::WithCaps {};

// A long queue behind the hog: the capability woke a watcher as it started
// the hog, and the watcher steals them all in a few halvings.
TEST_P(Steal, AHogDoesNotHoldALongQueueHostage) {
  constexpr int kShort = 200;
  std::atomic<int> ran{0};
  std::atomic<bool> rescued{false};
  run([&] {
    capstan::mvar<int> hog_done;
    // On the main thread's capability, queued behind the hog: the hog runs
    // first because main blocks right after forking.
    capstan::fork_io([&] {
      rescued = hog([&] { return ran.load() == kShort; });
      hog_done.put(1);
    });
    for (int i = 0; i < kShort; ++i) capstan::fork_io([&] { ran.fetch_add(1); });
    hog_done.take();
  });
  EXPECT_TRUE(rescued.load()) << "the short threads waited for the hog";
  EXPECT_EQ(ran.load(), kShort);
  EXPECT_GT(threads_stolen(), 0u);
}

// One thread behind the hog (too short a queue to wake a watcher): the
// ticker notices the capability has not scheduled for a tick and wakes one.
TEST_P(Steal, TheTickerCatchesAStallBehindAShortQueue) {
  std::atomic<bool> ran{false}, rescued{false};
  run([&] {
    capstan::mvar<int> hog_done;
    capstan::fork_io([&] {
      rescued = hog([&] { return ran.load(); });
      hog_done.put(1);
    });
    capstan::fork_io([&] { ran = true; });
    hog_done.take();
  });
  EXPECT_TRUE(rescued.load());
  EXPECT_EQ(threads_stolen(), 1u);
}

// A thread locked to the hog's capability (fork_on) is never stolen: it
// runs there, after the hog; an unlocked one queued beside it is stolen.
TEST_P(Steal, LockedThreadsStayOnTheirCapability) {
  std::atomic<bool> free_ran{false};
  std::atomic<int> locked_ran_on{-1};
  std::atomic<bool> locked_ran_during_hog{false}, hogging{false};
  run([&] {
    capstan::mvar<int> done;
    capstan::fork_on(0, [&] {
      hogging = true;
      (void)hog([&] { return free_ran.load(); });
      hogging = false;
      done.put(1);
    });
    capstan::fork_on(0, [&] {
      locked_ran_during_hog = hogging.load();
      locked_ran_on = static_cast<int>(capstan::current_capability());
      done.put(1);
    });
    capstan::fork_io([&] {
      free_ran = true;
      done.put(1);
    });
    for (int i = 0; i < 3; ++i) done.take();
  });
  EXPECT_TRUE(free_ran.load());
  EXPECT_EQ(locked_ran_on.load(), 0);
  EXPECT_FALSE(locked_ran_during_hog.load());
}

// A healthy capability is not stolen from: a ping-pong pair keeps one
// thread waiting most of the time, but the capability keeps picking.  (Not
// never: the OS may deschedule its OS thread for longer than kStallNs on a
// loaded machine, and then a steal is the right thing to do.  A watcher
// that ignored the epoch would steal at nearly every look.)
TEST_P(Steal, AHealthyCapabilityIsNotStolenFrom) {
  const int kHops = 200'000 / capstan_test::kScale;
  run([&] {
    capstan::mvar<int> ping, pong;
    capstan::fork_io([&] {
      for (int i = 0; i < kHops; ++i) pong.put(ping.take() + 1);
    });
    for (int i = 0; i < kHops; ++i) {
      ping.put(i);
      ASSERT_EQ(pong.take(), i + 1);
    }
  });
  EXPECT_LT(threads_stolen(), static_cast<std::uint64_t>(kHops / 1000));
}

INSTANTIATE_TEST_SUITE_P(Caps, Steal, ::testing::Values(2u, 3u), capstan_test::caps_name);

}  // namespace
