// mvar_stress.cpp - MVars hammered across capabilities with random yields
// and timeslices from 0 (switch at every safe point) to 20 ms: no value is
// lost or duplicated and nothing hangs (Note [Blocking on an MVar]).
#include <atomic>
#include <vector>

#include "stress.hpp"

namespace {

struct Param {
  unsigned caps;
  long slice_us;
};

class MVarStress : public ::testing::TestWithParam<Param> {};

INSTANTIATE_TEST_SUITE_P(, MVarStress,
                         ::testing::Values(Param{1, 0}, Param{2, 0}, Param{2, 20000}, Param{4, 0},
                                           Param{4, 1000}, Param{8, 0}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.caps) + "_C" +
                                  std::to_string(info.param.slice_us) + "us";
                         });

TEST_P(MVarStress, PingPongPairsExchangeEveryValueExactlyOnce) {
  stress::Watchdog dog(std::chrono::seconds(120), "pingpong pairs");
  const long kRounds = 20000 / stress::kScale;
  constexpr int kPairs = 8;
  std::atomic<long> checked{0};
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    capstan::mvar<int> done;
    for (int p = 0; p < kPairs; ++p) {
      auto ping = std::make_shared<capstan::mvar<long>>();
      auto pong = std::make_shared<capstan::mvar<long>>();
      capstan::fork_io([&, ping, pong, p] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(p));
        for (long i = 0; i < kRounds; ++i) {
          ping->put(i);
          stress::maybe_yield(rng);
          long back = pong->take();
          if (back == i + 1) checked.fetch_add(1, std::memory_order_relaxed);
        }
        done.put(1);
      });
      capstan::fork_io([&, ping, pong, p] {
        std::mt19937_64 rng(stress::seed() * 31 + static_cast<std::uint64_t>(p));
        for (long i = 0; i < kRounds; ++i) {
          long v = ping->take();
          stress::maybe_yield(rng);
          pong->put(v + 1);
        }
        done.put(1);
      });
    }
    for (int i = 0; i < 2 * kPairs; ++i) done.take();
  });
  EXPECT_EQ(checked.load(), kPairs * kRounds);
}

TEST_P(MVarStress, ManyProducersManyConsumersOneMVar) {
  stress::Watchdog dog(std::chrono::seconds(120), "many producers/consumers");
  const long kEach = 5000 / stress::kScale;
  constexpr int kProducers = 6, kConsumers = 5;
  const long total = kEach * kProducers;
  std::vector<std::atomic<int>> seen(static_cast<std::size_t>(total));
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    capstan::mvar<long> box;
    capstan::mvar<int> done;
    std::atomic<long> remaining{total};
    for (int p = 0; p < kProducers; ++p) {
      capstan::fork_io([&, p] {
        std::mt19937_64 rng(stress::seed() + 100 + static_cast<std::uint64_t>(p));
        for (long i = 0; i < kEach; ++i) {
          box.put(p * kEach + i);
          stress::maybe_yield(rng, 3);
        }
        done.put(1);
      });
    }
    for (int c = 0; c < kConsumers; ++c) {
      capstan::fork_io([&, c] {
        std::mt19937_64 rng(stress::seed() + 200 + static_cast<std::uint64_t>(c));
        while (remaining.fetch_sub(1) > 0) {
          long v = box.take();
          seen[static_cast<std::size_t>(v)].fetch_add(1, std::memory_order_relaxed);
          stress::maybe_yield(rng, 3);
        }
        done.put(1);
      });
    }
    for (int i = 0; i < kProducers + kConsumers; ++i) done.take();
  });
  for (long i = 0; i < total; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1) << "value " << i;
}

// Capabilities go to sleep between wake-ups: each hand-off to a locked
// thread on another capability crosses the sleep/wake protocol of
// Note [Sleeping capabilities] at a random moment.
TEST_P(MVarStress, WakingSleepingCapabilitiesNeverLosesAWakeUp) {
  if (GetParam().caps < 2) GTEST_SKIP() << "needs two capabilities";
  stress::Watchdog dog(std::chrono::seconds(120), "sleep/wake");
  const long kRounds = 3000 / stress::kScale;
  long got = 0;
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    capstan::mvar<long> to, from;
    capstan::fork_on(GetParam().caps - 1, [&] {
      for (long i = 0; i < kRounds; ++i) from.put(to.take() + 1);
    });
    std::mt19937_64 rng(stress::seed() + 7);
    for (long i = 0; i < kRounds; ++i) {
      // Let the other capability spin out and fall asleep (sometimes).
      auto spin = std::chrono::microseconds(rng() % 120);
      auto until = std::chrono::steady_clock::now() + spin;
      while (std::chrono::steady_clock::now() < until) {
      }
      to.put(i);
      got += from.take() == i + 1;
    }
  });
  EXPECT_EQ(got, kRounds);
}

}  // namespace
