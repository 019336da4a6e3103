// chan_stress.cpp - writers, readers using every kind of read (blocking,
// timed, try, masked), and a killer ending random readers, across
// capabilities: every written item is read exactly once or is still in
// the chan, and no reader hangs.
#include <atomic>
#include <memory>
#include <vector>

#include "stress.hpp"

namespace {

class ChanStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, ChanStress, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST_P(ChanStress, EveryItemExactlyOnceUnderKills) {
  using namespace capstan;
  stress::Watchdog dog(std::chrono::seconds(120), "chan readers, writers and kills");
  constexpr int kWriters = 4;
  const int kPerWriter = 200000 / static_cast<int>(stress::kScale);
  std::vector<std::atomic<int>> seen(kWriters * kPerWriter);
  std::atomic<long> kills{0}, timeouts{0};
  std::atomic<int> readers_alive{0};
  run(capstan_test::opts(GetParam(), std::chrono::microseconds(1000)), [&] {
    chan<int> c;
    mvar<int> writer_done;
    for (int w = 0; w < kWriters; ++w)
      fork_io([&, w] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(w));
        for (int i = 0; i < kPerWriter; ++i) {
          c.write(w * kPerWriter + i);
          if (rng() % 64 == 0) sleep_for(std::chrono::microseconds(rng() % 50));
          else stress::maybe_yield(rng, 8);
        }
        writer_done.put(1);
      });
    auto reader = [&](std::uint64_t s) {
      readers_alive.fetch_add(1);
      std::mt19937_64 rng(s);
      try {
        for (;;) {
          switch (rng() % 4) {
            case 0: seen[c.read()].fetch_add(1); break;
            case 1:
              if (auto v = c.read_for(std::chrono::microseconds(rng() % 60))) seen[*v].fetch_add(1);
              else timeouts.fetch_add(1);
              break;
            case 2:
              if (auto v = c.try_read()) seen[*v].fetch_add(1);
              else yield();
              break;
            case 3: mask([&] { seen[c.read()].fetch_add(1); }); break;
          }
        }
      } catch (const thread_killed&) {
        kills.fetch_add(1);
      }
      readers_alive.fetch_sub(1);
    };
    std::mt19937_64 rng(stress::seed() + 1000);
    std::vector<thread_id> readers;
    for (int r = 0; r < 6; ++r) readers.push_back(fork_io([&, r] { reader(stress::seed() + 2000 + r); }));
    int finished_writers = 0;
    std::uint64_t gen = 3000;
    while (finished_writers < kWriters) {
      if (writer_done.try_take()) {
        ++finished_writers;
        continue;
      }
      sleep_for(std::chrono::microseconds(rng() % 300));
      std::size_t victim = rng() % readers.size();
      kill_thread(readers[victim]);
      readers[victim] = fork_io([&, s = stress::seed() + gen++] { reader(s); });
    }
    for (thread_id t : readers) kill_thread(t);
    ASSERT_TRUE(capstan_test::green_wait_until([&] { return readers_alive.load() == 0; }));
    EXPECT_EQ(c.waiting(), 0u) << "a killed reader is still queued";
    while (auto v = c.try_read()) seen[*v].fetch_add(1);
  });
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
  EXPECT_GT(kills.load(), 0);
  std::fprintf(stderr, "kills %ld, timed-out reads %ld\n", kills.load(), timeouts.load());
}

}  // namespace
