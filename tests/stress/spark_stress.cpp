// spark_stress.cpp - many makers, many thieves: every spark is evaluated
// exactly once, results are right, the accounting adds up, makers that
// migrate (woken on another capability) still settle their sparks, and
// kills racing the completion of stolen sparks lose nothing, and makers
// interrupted while they evaluate their own sparks get the value on retry.
#include <array>
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

// Kills race completions (Note [Completing a stolen spark]): a maker
// makes sparks that idle capabilities steal and finish after a short,
// random amount of work, and forces some of them (the others are left to
// their destructors); a killer kills it at a random moment - before par,
// while it waits in get(), as a spark completes, while a destructor waits,
// or after it finished.  Every kill returns; every spark runs at most once
// and writes into the maker's heap only while the maker's frame lives (the
// frame frees it: ASan sees a late write); the accounting adds up.
TEST_P(SparkStress, KillsRaceCompletions) {
  stress::Watchdog dog(std::chrono::seconds(120), "kills racing spark completions");
  constexpr int kSparks = 4;
  constexpr int kDrivers = 2;
  const int kRounds = 2000 / static_cast<int>(stress::kScale);
  // A kill landing inside get() is a matter of timing; on a loaded machine
  // a whole run may miss it (4 in 40 runs with two at once), so runs repeat,
  // up to kAttempts, until one lands.  Every run's accounting is checked.
  // (Scaled down, under the sanitizers, the check is skipped: one run.)
  const int kAttempts = stress::kScale == 1 ? 5 : 1;
  std::atomic<long> interrupted{0};
  for (int attempt = 0; attempt < kAttempts && interrupted.load() == 0; ++attempt) {
    std::atomic<long> ran{0}, died{0}, forced{0};
    std::uint64_t killed_makers = 0;
    capstan::run(capstan_test::opts(GetParam(), std::chrono::microseconds(1000)), [&] {
      capstan::mvar<int> done;
      for (int d = 0; d < kDrivers; ++d) {
        capstan::fork_io([&, d] {
          std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(d));
          for (int round = 0; round < kRounds / kDrivers; ++round) {
            std::uint64_t maker_seed = rng();
            capstan::thread_id maker = capstan::fork_io([&ran, &forced, &interrupted, maker_seed] {
              std::mt19937_64 r(maker_seed);
              auto frame = std::make_unique<std::array<long, kSparks>>();
              std::vector<std::unique_ptr<capstan::spark<long>>> sparks;
              for (int k = 0; k < kSparks; ++k) {
                unsigned work = static_cast<unsigned>(r() % 20000);
                sparks.emplace_back(new capstan::spark<long>(capstan::par([&ran, slot = &(*frame)[k], work, k] {
                  for (unsigned i = 0; i < work; ++i) asm volatile("" ::: "memory");
                  *slot = k + 1;  // a write into the maker's frame
                  ran.fetch_add(1, std::memory_order_relaxed);
                  return static_cast<long>(k + 1);
                })));
              }
              stress::maybe_yield(r, 2);  // a poll point: thieves get sparks
              for (int k = 0; k < kSparks; ++k) {
                if (r() % 3 == 0) continue;  // left to the destructor
                try {
                  EXPECT_EQ(sparks[static_cast<std::size_t>(k)]->get(), k + 1);
                } catch (const capstan::thread_killed&) {
                  interrupted.fetch_add(1, std::memory_order_relaxed);
                  throw;
                }
                forced.fetch_add(1, std::memory_order_relaxed);
              }
            });
            for (unsigned y = static_cast<unsigned>(rng() % 6); y > 0; --y) capstan::yield();
            capstan::kill_thread(maker);  // returns once raised, or at once if it finished
            for (;;) {
              capstan::thread_state st = capstan::state_of(maker);
              if (st == capstan::thread_state::died) {
                died.fetch_add(1);
                break;
              }
              if (st == capstan::thread_state::finished) break;
              capstan::yield();
            }
          }
          done.put(1);
        });
      }
      for (int d = 0; d < kDrivers; ++d) done.take();
      // Now, not after run(): shutdown may kill a spark thread still looking
      // for sparks.  (Each death was seen by state_of, after it was counted.)
      killed_makers = capstan::statistics().threads_killed;
    });
    auto s = capstan::statistics().sparks;
    EXPECT_EQ(static_cast<std::uint64_t>(ran.load()), s.converted + s.fizzled)
        << "a spark ran twice, or ran after it was discarded";
    EXPECT_EQ(s.overflowed, 0u);
    // (A maker killed before or between its pars makes fewer sparks.)
    EXPECT_LE(s.created, static_cast<std::uint64_t>(kRounds / kDrivers * kDrivers * kSparks));
    EXPECT_GE(s.created, static_cast<std::uint64_t>(forced.load()));
    EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd);
    EXPECT_EQ(killed_makers, static_cast<std::uint64_t>(died.load()));
    EXPECT_GT(died.load(), 0) << "no kill landed: the race was never run";
  }
  if (stress::kScale == 1) {
    EXPECT_GT(interrupted.load(), 0) << "no kill landed in get() in " << kAttempts
                                     << " runs: the race was never run";
  }
}

}  // namespace

namespace {

struct poke {};

// Note [Evaluating a spark here] (rts/sparks/sparks.cpp): makers whose get()
// is interrupted at random - throw_to from a driver, or a short timeout
// of their own - while they evaluate the spark inline or wait for a thief,
// retry until they have the value.  Every get() that returns gives the
// right value; an evaluation that was interrupted is started again, one
// that completed never is (each closure completes at most once), and a
// retry never sees a stale exception.
TEST_P(SparkStress, InterruptedMakersGetTheValueOnRetry) {
  stress::Watchdog dog(std::chrono::seconds(120), "interrupted spark makers");
  constexpr int kSparks = 3;
  const int kMakers = 400 / static_cast<int>(stress::kScale);
  std::vector<std::atomic<int>> completions(static_cast<std::size_t>(kMakers * kSparks));
  std::atomic<long> interruptions{0}, wrong{0}, stale{0};
  capstan::run(capstan_test::opts(GetParam(), std::chrono::microseconds(500)), [&] {
    capstan::mvar<int> done;
    std::mt19937_64 rng(stress::seed());
    for (int m = 0; m < kMakers; ++m) {
      std::uint64_t maker_seed = rng();
      capstan::mvar<int> finished;
      // Forked masked (as GHC's forkIOWithUnmask): no poke can land before
      // the maker's try blocks; they land only inside `restore`.
      capstan::thread_id maker;
      capstan::mask([&](capstan::mask_restore restore) {
        maker = capstan::fork_io([&, m, maker_seed, restore] {
        std::mt19937_64 r(maker_seed);
        std::vector<std::unique_ptr<capstan::spark<long>>> sparks;
        for (int k = 0; k < kSparks; ++k) {
          unsigned work = static_cast<unsigned>(r() % 200);
          std::atomic<int>* done_count = &completions[static_cast<std::size_t>(m * kSparks + k)];
          sparks.emplace_back(new capstan::spark<long>(capstan::par([work, done_count, k] {
            for (unsigned i = 0; i < work; ++i) capstan::yield_point();
            done_count->fetch_add(1, std::memory_order_relaxed);
            return static_cast<long>(k + 100);
          })));
        }
        {
          for (int k = 0; k < kSparks; ++k) {
            for (;;) {
              try {
                long v = restore([&]() -> long {
                  auto& sp = *sparks[static_cast<std::size_t>(k)];
                  if (r() % 2 == 0) {
                    auto got = capstan::timeout(std::chrono::microseconds(r() % 300),
                                                [&] { return sp.get(); });
                    return got ? *got : -1;
                  }
                  return sp.get();
                });
                if (v == -1) {
                  interruptions.fetch_add(1, std::memory_order_relaxed);
                  continue;  // timed out: try again
                }
                if (v != k + 100) wrong.fetch_add(1);
                break;
              } catch (const poke&) {
                interruptions.fetch_add(1, std::memory_order_relaxed);
              } catch (const capstan::timeout_expired&) {
                stale.fetch_add(1);  // a stale one: no timeout() frame was left to catch it
                break;
              }
            }
          }
          finished.put(1);
        }
      });
      });
      for (int p = static_cast<int>(rng() % 4); p > 0; --p) {
        for (unsigned y = static_cast<unsigned>(rng() % 3); y > 0; --y) capstan::yield();
        if (capstan::state_of(maker) == capstan::thread_state::finished) break;
        try {
          capstan::throw_to(maker, poke{});
        } catch (...) {
        }
      }
      finished.take();
    }
    done.put(1);
    done.take();
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(stale.load(), 0);
  for (std::size_t i = 0; i < completions.size(); ++i)
    EXPECT_EQ(completions[i].load(), 1) << "spark " << i << " completed " << completions[i].load() << " times";
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd);
  std::fprintf(stderr, "interruptions: %ld\n", interruptions.load());
}

}  // namespace
