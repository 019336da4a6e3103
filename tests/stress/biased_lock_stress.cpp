// biased_lock_stress.cpp - biased mvar locks revoked while their owner is
// inside them (Note [Biased locks] in capstan/detail/mvar_core.hpp).  Each
// round the one capability makes fresh mvars, each holding a token that
// guards a plain counter; green threads take the token, bump the counter
// and put it back, while plain OS threads do the same with try_take and
// try_put - so the first OS-thread operation on each mvar revokes its bias
// at a random moment of the green threads' sections.  A section that two
// sides entered at once loses an increment; the counts must match exactly.
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "stress.hpp"

namespace {

struct Param {
  long slice_us;
  unsigned os_threads;
};

class BiasedLockStress : public ::testing::TestWithParam<Param> {};

INSTANTIATE_TEST_SUITE_P(, BiasedLockStress,
                         ::testing::Values(Param{0, 1}, Param{0, 2}, Param{20000, 2},
                                           Param{1000, 3}),
                         [](const auto& info) {
                           return "C" + std::to_string(info.param.slice_us) + "us_OS" +
                                  std::to_string(info.param.os_threads);
                         });

struct Guarded {
  capstan::mvar<int> token;  // full: the counter is free
  long count = 0;            // guarded by holding the token
};

TEST_P(BiasedLockStress, RevokingUnderTheOwnerLosesNoSection) {
  stress::Watchdog dog(std::chrono::seconds(240), "biased lock revocations");
  const int kRounds = static_cast<int>(300 / stress::kScale);
  constexpr int kMvars = 8;
  constexpr int kGreen = 6;
  const long kGreenOps = 400 / stress::kScale + 20;
  const long kOsOps = 300 / stress::kScale + 20;
  long lost = 0, checked = 0;
  capstan::run(capstan_test::opts(1, std::chrono::microseconds(GetParam().slice_us)), [&] {
    for (int round = 0; round < kRounds; ++round) {
      auto g = std::make_unique<Guarded[]>(kMvars);  // made here: biased, if locks are
      for (int i = 0; i < kMvars; ++i) g[i].token.put(1);
      std::atomic<long> done_ops{0};
      capstan::mvar<int> done;
      for (int t = 0; t < kGreen; ++t) {
        capstan::fork_io([&, t] {
          std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(round * 64 + t));
          for (long k = 0; k < kGreenOps; ++k) {
            Guarded& x = g[rng() % kMvars];
            int tok = x.token.take();
            long c = x.count;
            stress::maybe_yield(rng, 8);  // inside the section now and then
            x.count = c + 1;
            x.token.put(tok);
            done_ops.fetch_add(1, std::memory_order_relaxed);
          }
          done.put(1);
        });
      }
      std::vector<std::thread> os;
      for (unsigned o = 0; o < GetParam().os_threads; ++o) {
        os.emplace_back([&, o] {
          std::mt19937_64 rng(stress::seed() * 7 + static_cast<std::uint64_t>(round * 64 + o));
          for (long k = 0; k < kOsOps;) {
            Guarded& x = g[rng() % kMvars];
            std::optional<int> tok = x.token.try_take();
            if (!tok) {
              std::this_thread::yield();
              continue;
            }
            ++x.count;
            EXPECT_TRUE(x.token.try_put(*tok)) << "the token came back while we held it";
            done_ops.fetch_add(1, std::memory_order_relaxed);
            ++k;
          }
        });
      }
      for (int t = 0; t < kGreen; ++t) done.take();
      for (auto& th : os) th.join();
      long total = 0;
      for (int i = 0; i < kMvars; ++i) {
        EXPECT_EQ(g[i].token.take(), 1);
        total += g[i].count;
      }
      lost += done_ops.load() - total;
      checked += total;
    }
  });
  EXPECT_EQ(lost, 0) << "sections overlapped: increments lost";
  EXPECT_EQ(checked, kRounds * (kGreen * kGreenOps + static_cast<long>(GetParam().os_threads) * kOsOps));
}

}  // namespace
