// idle_test.cpp - Note [Spinning only on a free CPU]: with more
// capabilities than CPUs, an idle capability neither spins nor is woken for
// sparks while every CPU has a busy capability; threads waiting behind a
// stalled capability are still rescued; and a hunt that asks a busy
// capability early still ends in sleep.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "capstan_test.hpp"
#include "runtime/runtime.hpp"
#include "schedule/idle.hpp"

namespace {

using capstan::rts::Hold;
using capstan::rts::rt;
using capstan_test::RuntimeTest;
using capstan_test::busy_work;

class Idle : public RuntimeTest {};

// Lets capabilities 1 and 2 reach their sleep: they need the CPU to get
// there, so the caller (main) sleeps rather than yields.  False if they
// did not within wait_until's limit.
bool until_capabilities_1_and_2_sleep() {
  return capstan_test::wait_until(
      [] {
        return rt.caps[1]->hold.load() == Hold::sleeping &&
               rt.caps[2]->hold.load() == Hold::sleeping;
      },
      [] { capstan::sleep_for(std::chrono::milliseconds(1)); });
}

// Every capability but main's asleep, one CPU: main's par() calls must not
// wake a sleeper (without the rule, the first par() wakes one, which steals
// and converts sparks, time-slicing with main on the one CPU).
TEST_F(Idle, NoCapabilityIsWokenForSparksWithoutAFreeCpu) {
  capstan_test::CpuPin pin(1);
  ASSERT_TRUE(pin.ok()) << "sched_setaffinity failed";
  constexpr int kSparks = 4000;
  const long w = busy_work(20);
  long sum = 0, want = 0;
  bool all_slept = false;
  capstan::run(capstan_test::opts(3), [&] {
    ASSERT_EQ(rt.n_cpus, 1u);
    all_slept = until_capabilities_1_and_2_sleep();
    for (int i = 0; i < kSparks; ++i) {
      auto s = capstan::par([i] { return busy_work(20) + i; });
      long mine = busy_work(20);
      sum += s.get() + mine;
      want += 2 * w + i;
    }
  });
  ASSERT_TRUE(all_slept);
  auto sp = capstan::statistics().sparks;
  EXPECT_EQ(sum, want);
  EXPECT_EQ(sp.created, unsigned{kSparks});
  EXPECT_EQ(sp.converted, 0u) << "a capability was woken for sparks with no CPU free";
  EXPECT_EQ(sp.fizzled, unsigned{kSparks});
}

// Without a free CPU, a par() that finds sleepers tries once to wake one
// and the pool then skips the next 64 tries (Note [Waking capabilities for
// sparks]): the countdown drops by one a par() and the next failed try
// sets it again.  Without the back-off every par() read the shared counts
// (2 % of parfib's samples at -N8 on two CPUs).
TEST_F(Idle, ParBacksOffFromWakingASleeperWithoutAFreeCpu) {
  capstan_test::CpuPin pin(1);
  ASSERT_TRUE(pin.ok()) << "sched_setaffinity failed";
  constexpr int kSparks = 200;
  std::vector<std::uint32_t> seen;
  long sum = 0;
  bool all_slept = false;
  capstan::run(capstan_test::opts(3), [&] {
    ASSERT_EQ(rt.n_cpus, 1u);
    all_slept = until_capabilities_1_and_2_sleep();
    const auto& pool = rt.caps[0]->sparks;  // main is bound to capability 0
    for (int i = 0; i < kSparks; ++i) {
      auto s = capstan::par([i] { return i; });
      seen.push_back(pool.wake_skip);
      sum += s.get();
    }
  });
  ASSERT_TRUE(all_slept);
  EXPECT_EQ(sum, long{kSparks} * (kSparks - 1) / 2);
  ASSERT_EQ(seen.size(), std::size_t{kSparks});
  for (int i = 0; i < kSparks; ++i)
    ASSERT_EQ(seen[i], 64u - static_cast<unsigned>(i % 65)) << "after par() number " << i;
  EXPECT_EQ(capstan::statistics().sparks.converted, 0u);
}

// The watch for stalled capabilities is not speculative: threads queued
// behind a thread that never reaches a safe point are taken by an idle
// capability even when no CPU is free for it.
TEST_F(Idle, AStallIsRescuedWithoutAFreeCpu) {
  capstan_test::CpuPin pin(1);
  ASSERT_TRUE(pin.ok()) << "sched_setaffinity failed";
  constexpr int kShort = 20;
  std::atomic<int> ran{0};
  std::atomic<bool> rescued{false};
  capstan::run(capstan_test::opts(3), [&] {
    capstan::mvar<int> hog_done;
    capstan::fork_io([&] {
      auto end = std::chrono::steady_clock::now() + capstan_test::kWaitGuard;
      while (ran.load() != kShort && std::chrono::steady_clock::now() < end) {
      }
      rescued = ran.load() == kShort;
      hog_done.put(1);
    });
    for (int i = 0; i < kShort; ++i) capstan::fork_io([&] { ran.fetch_add(1); });
    hog_done.take();
  });
  EXPECT_TRUE(rescued.load()) << "the short threads waited for the hog";
  EXPECT_EQ(ran.load(), kShort);
}

// Note [Asking before the sparks exist]: a hunt keeps posting early
// requests on the pool of a busy capability that has made sparks, but only
// for its spin: next to a maker that makes no more, the idle capability
// still goes to sleep.  Main stays busy (no runtime call) after one spark,
// capability 1 is woken by a thread sent to it, and must sleep again.
TEST_F(Idle, AHuntNextToABusySparkMakerStillSleeps) {
  bool ran_there = false, slept_again = false;
  capstan::run(capstan_test::opts(2), [&] {
    {
      auto s = capstan::par([] { return 1; });  // capability 0 has made a spark
      EXPECT_EQ(s.get(), 1);
    }
    std::uint64_t s0 = rt.caps[1]->sleeps.get();
    std::atomic<bool> flag{false};
    capstan::fork_on(1, [&] { flag.store(true); });
    auto no_runtime_call = [] { std::atomic_signal_fence(std::memory_order_seq_cst); };
    ran_there = capstan_test::wait_until([&] { return flag.load(); }, no_runtime_call);
    slept_again = capstan_test::wait_until(
        [&] { return rt.caps[1]->sleeps.get() > s0 && rt.caps[1]->hold.load() == Hold::sleeping; },
        no_runtime_call);
  });
  EXPECT_TRUE(ran_there);
  EXPECT_TRUE(slept_again) << "capability 1 kept hunting next to a busy capability with an empty pool";
}

}  // namespace

namespace {

// resting() - what deadlock detection and the ticker take for "nothing
// runs here and nothing waits for it" - is false for a free capability
// that still holds stolen sparks not yet run: their makers may wait in
// get() for them (a capability a bound or in-call Task left free, its
// spare refused by the OS).  It used to look only at the pool.
TEST(Resting, AFreeCapabilityWithAStolenSparkBacklogIsNotResting) {
  auto c = std::make_unique<capstan::rts::Capability>();
  c->hold.store(Hold::free);
  EXPECT_TRUE(capstan::rts::resting(c.get()));
  c->n_stolen_sparks.store(1);
  EXPECT_FALSE(capstan::rts::resting(c.get()));
  c->n_stolen_sparks.store(0);
  c->hold.store(Hold::held);
  EXPECT_FALSE(capstan::rts::resting(c.get()));
}

}  // namespace
