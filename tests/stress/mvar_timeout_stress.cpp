// mvar_timeout_stress.cpp - takers with random time-outs against putters
// with random delays, across capabilities: each value is delivered exactly
// once (taken, or left in the mvar), never lost or duplicated, and no taker
// hangs (Note [Timed takes]).
#include <atomic>
#include <memory>
#include <vector>

#include "stress.hpp"

namespace {

class MVarTimeoutStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, MVarTimeoutStress, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST_P(MVarTimeoutStress, ExactlyOnceUnderRandomRaces) {
  stress::Watchdog dog(std::chrono::seconds(120), "mvar timeout races");
  const int kRounds = 3000 / stress::kScale;
  constexpr int kPairs = 6;
  std::atomic<long> put_sum{0}, taken_sum{0}, timeouts{0};
  capstan::run(capstan_test::opts(GetParam(), std::chrono::microseconds(1000)), [&] {
    capstan::mvar<int> done;
    std::vector<std::shared_ptr<capstan::mvar<int>>> boxes;
    for (int p = 0; p < kPairs; ++p) {
      auto m = std::make_shared<capstan::mvar<int>>();
      boxes.push_back(m);
      capstan::fork_io([&, m, p] {  // putter
        std::mt19937_64 rng(stress::seed() + 2 * static_cast<std::uint64_t>(p));
        for (int i = 1; i <= kRounds; ++i) {
          if (rng() % 8 == 0) capstan::sleep_for(std::chrono::microseconds(rng() % 100));
          else stress::maybe_yield(rng, 2);
          if (m->try_put(i)) put_sum += i;  // a blocking put could outlive its taker
        }
        done.put(1);
      });
      capstan::fork_io([&, m, p] {  // taker
        std::mt19937_64 rng(stress::seed() + 2 * static_cast<std::uint64_t>(p) + 1);
        for (int i = 0; i < kRounds; ++i) {
          if (auto v = m->take_for(std::chrono::microseconds(rng() % 80))) taken_sum += *v;
          else ++timeouts;
        }
        done.put(1);
      });
    }
    for (int k = 0; k < 2 * kPairs; ++k) done.take();
    for (auto& m : boxes)
      while (auto v = m->try_take()) taken_sum += *v;
  });
  EXPECT_EQ(taken_sum.load(), put_sum.load());
  EXPECT_GT(timeouts.load(), 0);
}

}  // namespace
