// shutdown_stress.cpp - start and stop the runtime over and over with
// threads in every state, racing shutdown against puts, takes and mvar
// destruction (Note [Sticky wake-up], Note [Shutdown]).
#include <atomic>
#include <memory>
#include <vector>

#include "stress.hpp"

namespace {

TEST(ShutdownStress, StartStopWithRandomWorkNeverHangsOrLeaks) {
  stress::Watchdog dog(std::chrono::seconds(300), "start/stop loop");
  std::mt19937_64 rng(stress::seed());
  const int kRounds = static_cast<int>(300 / stress::kScale);
  for (int round = 0; round < kRounds; ++round) {
    unsigned caps = 1 + static_cast<unsigned>(rng() % 4);
    int threads = static_cast<int>(rng() % 200);
    std::atomic<int> alive{0};
    struct Alive {
      std::atomic<int>* n;
      explicit Alive(std::atomic<int>* a) : n(a) { n->fetch_add(1); }
      ~Alive() { n->fetch_sub(1); }
    };
    auto seed = rng();
    capstan::run(capstan_test::opts(caps, std::chrono::microseconds(rng() % 2 ? 0 : 1000)), [&] {
      auto shared = std::make_shared<std::vector<capstan::mvar<int>>>(8);
      for (int i = 0; i < threads; ++i) {
        capstan::fork_io([&, shared, i] {
          Alive a(&alive);
          std::mt19937_64 r(seed + static_cast<std::uint64_t>(i));
          for (;;) {
            auto& m = (*shared)[r() % shared->size()];
            switch (r() % 4) {
              case 0: m.take(); break;
              case 1: m.put(1); break;
              case 2: m.try_put(1); break;
              default: capstan::yield(); break;
            }
          }
        });
      }
      for (int k = 0; k < static_cast<int>(rng() % 50); ++k) capstan::yield();
    });
    auto s = capstan::statistics();
    ASSERT_EQ(alive.load(), 0) << "round " << round << ": a stack was not unwound";
    ASSERT_EQ(s.threads_created, s.threads_finished) << "round " << round;
    ASSERT_EQ(s.threads_abandoned, 0u);
  }
}

// Destroying mvars whose waiters are being woken by puts, killed by
// shutdown and orphaned all at once: each waiter ends exactly one way.
TEST(ShutdownStress, OrphaningRacesWithPutsAndShutdown) {
  stress::Watchdog dog(std::chrono::seconds(300), "orphan races");
  std::mt19937_64 rng(stress::seed() + 1);
  const int kRounds = static_cast<int>(100 / stress::kScale);
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<int> ended{0}, started{0};
    static constexpr int kWaiters = 40;
    capstan::run(capstan_test::opts(1 + static_cast<unsigned>(rng() % 4), std::chrono::microseconds(0)), [&] {
      auto box = std::make_shared<capstan::mvar<int>>();
      for (int i = 0; i < kWaiters; ++i) {
        capstan::fork_io([&, m = box.get()] {
          started.fetch_add(1);
          try {
            m->take();
          } catch (const capstan::blocked_indefinitely&) {
          } catch (const capstan::thread_killed&) {
            ended.fetch_add(1);
            throw;
          }
          ended.fetch_add(1);
        });
      }
      while (box->waiting() < kWaiters) capstan::yield();
      capstan::fork_io([box] {  // the last owner: the mvar dies with it
        for (int i = 0; i < kWaiters / 2; ++i) box->try_put(i);
      });
      for (int k = 0; k < static_cast<int>(rng() % 4); ++k) capstan::yield();
      box.reset();  // the putter's copy keeps it alive until it ends
    });
    ASSERT_EQ(ended.load(), kWaiters) << "round " << round;
  }
}

}  // namespace
