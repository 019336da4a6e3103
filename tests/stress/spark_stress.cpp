// spark_stress.cpp - many makers, many thieves: every spark is evaluated
// exactly once, results are right, the accounting adds up, and makers that
// migrate (woken on another capability) still settle their sparks.
#include <atomic>
#include <memory>
#include <vector>

#include "stress.hpp"

namespace {

class SparkStress : public ::testing::TestWithParam<unsigned> {};
INSTANTIATE_TEST_SUITE_P(, SparkStress, ::testing::Values(2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

long tree(int depth, std::vector<std::atomic<int>>& hits, long id, std::mt19937_64& rng) {
  if (depth == 0) {
    hits[static_cast<std::size_t>(id)].fetch_add(1, std::memory_order_relaxed);
    return 1;
  }
  auto left = capstan::par([&hits, depth, id, seed = rng()] {
    std::mt19937_64 r(seed);
    return tree(depth - 1, hits, 2 * id, r);
  });
  long right = tree(depth - 1, hits, 2 * id + 1, rng);
  if (rng() % 8 == 0) capstan::yield();  // shuffle: give thieves a chance
  if (rng() % 16 == 0) return right + (rng() % 2 ? left.get() : left.get());
  return left.get() + right;
}

TEST_P(SparkStress, EverySparkIsEvaluatedExactlyOnce) {
  stress::Watchdog dog(std::chrono::seconds(120), "spark tree");
  const int kDepth = 14 - (stress::kScale > 1 ? 3 : 0);
  const int kMakers = 4;
  std::vector<std::vector<std::atomic<int>>> hits;
  for (int m = 0; m < kMakers; ++m) hits.emplace_back(std::size_t{1} << (kDepth + 1));
  capstan::run(capstan_test::opts(GetParam(), std::chrono::microseconds(1000)), [&] {
    capstan::mvar<long> done;
    for (int m = 0; m < kMakers; ++m) {
      capstan::fork_io([&, m] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(m));
        done.put(tree(kDepth, hits[static_cast<std::size_t>(m)], 1, rng));
      });
    }
    for (int m = 0; m < kMakers; ++m) EXPECT_EQ(done.take(), 1L << kDepth);
  });
  for (auto& h : hits)
    for (std::size_t i = std::size_t{1} << kDepth; i < h.size(); ++i) ASSERT_EQ(h[i].load(), 1) << i;
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd);
  EXPECT_EQ(s.gcd, 0u);
}

// A maker blocks on an mvar between par and get, so it may be woken on
// another capability; get() must bring it back to the spark's pool.
TEST_P(SparkStress, MakersThatMigrateSettleTheirSparks) {
  stress::Watchdog dog(std::chrono::seconds(120), "migrating makers");
  std::atomic<long> evaluated{0};
  const int kRounds = 2000 / static_cast<int>(stress::kScale);
  capstan::run(capstan_test::opts(GetParam(), std::chrono::microseconds(0)), [&] {
    capstan::mvar<int> ping, done;
    capstan::fork_io([&] {
      for (int i = 0; i < kRounds; ++i) ping.put(i);
    });
    for (int w = 0; w < 2; ++w) {
      capstan::fork_io([&] {
        for (int i = 0; i < kRounds / 2; ++i) {
          auto s = capstan::par([&] { return evaluated.fetch_add(1) >= 0; });
          ping.take();  // may wake us on another capability
          EXPECT_TRUE(s.get());
        }
        done.put(1);
      });
    }
    done.take();
    done.take();
  });
  EXPECT_EQ(evaluated.load(), kRounds / 2 * 2);
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created + s.overflowed, static_cast<std::uint64_t>(kRounds / 2 * 2));
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd);
}

}  // namespace
