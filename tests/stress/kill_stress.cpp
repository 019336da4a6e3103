// kill_stress.cpp - random asynchronous exceptions against random blocking
// operations: tokens move between mvars while killers throw and kill at
// random; no token is lost or duplicated, every thread's fate is
// accounted for, and nothing hangs (Note [Raising asynchronously]).
#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

#include "capstan/capstan.hpp"
#include "stress.hpp"

namespace {

using namespace capstan;
using namespace std::chrono_literals;

struct Param {
  unsigned caps;
  long slice_us;
};

class KillStress : public ::testing::TestWithParam<Param> {};

INSTANTIATE_TEST_SUITE_P(, KillStress,
                         ::testing::Values(Param{1, 0}, Param{1, 20000}, Param{2, 0},
                                           Param{2, 1000}, Param{4, 0}, Param{4, 20000}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.caps) + "_C" +
                                  std::to_string(info.param.slice_us) + "us";
                         });

struct poke {};  // thrown at workers, which catch it and carry on

TEST_P(KillStress, TokensSurviveRandomKillsAndThrows) {
  stress::Watchdog dog(std::chrono::seconds(300), "kill stress");
  constexpr int kBoxes = 16, kTokens = 6, kWorkers = 24;
  const int kRounds = 20000 / stress::kScale;
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    std::vector<std::unique_ptr<mvar<int>>> boxes;
    for (int i = 0; i < kBoxes; ++i) boxes.push_back(std::make_unique<mvar<int>>());
    for (int t = 0; t < kTokens; ++t) boxes[static_cast<std::size_t>(t)]->put(1);
    std::atomic<int> killed{0}, poked{0}, moves{0};
    std::vector<thread_id> workers;
    // Workers are forked masked and unmask each step with restore (GHC's
    // forkIOWithUnmask idiom): a throw that arrives before a worker has run
    // lands inside its handlers, not before them.
    mask([&](mask_restore restore) {
    for (int w = 0; w < kWorkers; ++w) {
      workers.push_back(fork_io([&, w, restore] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(w));
        try {
          for (;;) {
            try {
              restore([&] {
              auto& from = *boxes[rng() % kBoxes];
              auto& to = *boxes[rng() % kBoxes];
              std::optional<int> tok;
              switch (rng() % 4) {
                case 0: tok = from.take_for(std::chrono::microseconds(rng() % 500)); break;
                case 1: tok = timeout(std::chrono::microseconds(rng() % 800), [&] { return from.take(); }); break;
                case 2: tok = from.try_take(); break;
                default: sleep_for(std::chrono::microseconds(rng() % 200)); break;
              }
              if (tok) {
                // Holding a token: nothing may interrupt us until it is back.
                // At most kTokens boxes are full, so some box is empty: the
                // put never blocks (a blocking put here could wait forever
                // once every other worker is dead).
                uninterruptible_mask([&] {
                  stress::maybe_yield(rng);
                  if (!to.try_put(*tok)) {
                    bool placed = false;
                    for (auto& b : boxes) if (!placed) placed = b->try_put(*tok);
                    ASSERT_TRUE(placed);
                  }
                });
                moves.fetch_add(1, std::memory_order_relaxed);
              }
              if (rng() % 8 == 0) mask([&] { stress::maybe_yield(rng); });
              yield_point();
              });
            } catch (const poke&) {
              poked.fetch_add(1, std::memory_order_relaxed);
            }
          }
        } catch (const thread_killed&) {
          killed.fetch_add(1, std::memory_order_relaxed);
          throw;
        }
      }));
    }
    });
    // Killers: poke at random; kill half of the workers along the way.
    mvar<int> killers_done;
    constexpr int kKillers = 3;
    for (int k = 0; k < kKillers; ++k) {
      fork_io([&, k] {
        std::mt19937_64 rng(stress::seed() + 1000 + static_cast<std::uint64_t>(k));
        for (int i = 0; i < kRounds; ++i) {
          thread_id victim = workers[rng() % workers.size()];
          if (i % (kRounds / 4 + 1) == 0 && (rng() % 2) == 0) kill_thread(victim);
          else throw_to(victim, poke{});
          stress::maybe_yield(rng);
        }
        killers_done.put(1);
      });
    }
    for (int k = 0; k < kKillers; ++k) killers_done.take();
    for (thread_id w : workers) kill_thread(w);
    // kill_thread returns once thread_killed is raised in w; w then unwinds
    // (its handler counts and rethrows) before it dies.
    for (thread_id w : workers) {
      while (state_of(w) == thread_state::running || state_of(w) == thread_state::blocked) yield();
      EXPECT_EQ(state_of(w), thread_state::died);
    }
    EXPECT_EQ(killed.load(), kWorkers);
    int tokens = 0;
    for (auto& b : boxes) tokens += b->try_take().value_or(0);
    EXPECT_EQ(tokens, kTokens) << "a token was lost or duplicated (" << moves.load() << " moves, "
                               << poked.load() << " pokes)";
  });
  auto s = capstan::statistics();
  EXPECT_EQ(s.live_threads, 0u);
  EXPECT_EQ(s.threads_abandoned, 0u);
  EXPECT_GE(s.async_exceptions, static_cast<std::uint64_t>(kWorkers));
}

// Throwers that are themselves thrown to while they wait: a throw lands
// exactly once or not at all (Note [Waiting for a throw to land]).
TEST_P(KillStress, ThrowersInterruptedWhileWaiting) {
  stress::Watchdog dog(std::chrono::seconds(300), "interrupted throwers");
  const int kRounds = 10000 / stress::kScale;
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    for (int r = 0; r < kRounds; ++r) {
      std::atomic<int> landed{0}, thrower_state{0};  // 1: returned, 2: interrupted
      std::atomic<bool> stop{false}, masked{false};
      // A masked target: the throw waits until it unmasks.
      thread_id target = fork_io([&] {
        // The poke lands when the mask ends, or at the safe point after.
        try {
          mask([&] {
            masked = true;
            while (!stop.load()) yield();
          });
          yield_point();
          // Stay alive for a moment so a second raise would be seen.
          for (int i = 0; i < 3; ++i) yield();
        } catch (const poke&) {
          landed.fetch_add(1);
        }
      });
      // Throw only once the target is inside its mask: at -N2 the thrower
      // could otherwise run before the target has even started (an idle
      // capability may take either of them), and a poke raised before the
      // try would end the target, as in GHC, with an uncaught exception.
      while (!masked.load()) yield();
      thread_id thrower = fork_io([&] {
        try {
          throw_to(target, poke{});
          thrower_state = 1;
        } catch (const thread_killed&) {
          thrower_state = 2;
        }
      });
      // The throw is posted once the thrower waits for the masked target.
      while (state_of(thrower) != thread_state::blocked) yield();
      if (r % 2) kill_thread(thrower);
      stop = true;
      while (state_of(target) != thread_state::finished || state_of(thrower) == thread_state::running ||
             state_of(thrower) == thread_state::blocked)
        yield();
      if (thrower_state.load() == 1) {
        EXPECT_EQ(landed.load(), 1) << "throw_to returned but nothing landed";
      }
      EXPECT_LE(landed.load(), 1);
    }
  });
}

// A throw at a thread that blocks while unwinding (a destructor taking a
// mutex, run by a throw's unwinding) must never be raised there: it would
// terminate().  The thrower decided whether the wait was interruptible
// before it held the mutex's lock, reading the target's exception state
// that the target saves only as it switches out: a target still on its
// way to the switch looked not to be unwinding, and the thrower raised in
// it (std::terminate after 19-341 of these rounds at -N2, 5 runs of 5).
// Needs a thrower on another capability.
class UnwindingStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, UnwindingStress, ::testing::Values(2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST_P(UnwindingStress, AThrowNeverLandsInAThreadBlockedWhileUnwinding) {
  stress::Watchdog dog(std::chrono::seconds(120), "throw at an unwinding thread");
  const long kRounds = 3000 / stress::kScale;
  std::atomic<long> poked{0}, done{0};
  capstan::run(capstan_test::opts(GetParam(), std::chrono::microseconds(300)), [&] {
    capstan::mutex m;
    auto ended = [](thread_id t) {
      thread_state s = state_of(t);
      return s == thread_state::finished || s == thread_state::died;
    };
    for (long r = 0; r < kRounds; ++r) {
      std::atomic<bool> go{false};
      m.lock();
      thread_id t = fork_on(1, [&] {
        try {
          struct relock {
            capstan::mutex& m;
            std::atomic<bool>& go;
            ~relock() {
              go = true;
              std::lock_guard<capstan::mutex> g(m);  // parks while unwinding
            }
          } d{m, go};
          throw std::runtime_error("unwind");
        } catch (const std::runtime_error&) {
          ++done;
        } catch (const poke&) {
          ++poked;  // raised after the destructor: legal
        }
      });
      thread_id thrower = fork_on(0, [&, t] {
        while (!go.load()) {
        }
        throw_to(t, poke{});
      });
      while (state_of(t) != thread_state::blocked && !ended(t)) yield();
      sleep_for(std::chrono::microseconds(20));
      m.unlock();
      while (!ended(t) || !ended(thrower)) yield();
    }
  });
  EXPECT_EQ(poked.load() + done.load(), kRounds);
}

// Note [Wait locks]: until a run's first throw, blockers and wakers write
// blocked_on/waiter without the wait lock; the first throw turns the locks
// on and waits only for the unlocked writes in progress on the other
// capabilities.  Here each run's first throw lands, after a random number
// of hand-offs, on a thread of one of several pairs handing a value back
// and forth across capabilities (every block and wake skipping the lock),
// while the others carry on.  A write the thrower did not wait for would
// leave it reading a stale wait: it would queue the exception for a safe
// point its parked target never reaches (kill_thread hangs: the watchdog),
// or unlink a waiter from an mvar the target had left.  Every thread must
// die of its kill exactly once.
class FirstThrowStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, FirstThrowStress, ::testing::Values(2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST_P(FirstThrowStress, TheFirstThrowOfARunLandsAmongUnlockedHandOffs) {
  stress::Watchdog dog(std::chrono::seconds(240), "the first throw of a run");
  constexpr unsigned kPairs = 4;
  const int kRuns = 400 / static_cast<int>(stress::kScale);
  const unsigned caps = GetParam();
  std::mt19937_64 rng(stress::seed());
  long first_hops = 0;
  for (int run_no = 0; run_no < kRuns; ++run_no) {
    const unsigned victim = static_cast<unsigned>(rng() % (2 * kPairs));
    const long wait_hops = static_cast<long>(rng() % 2000);
    std::atomic<int> killed{0};
    capstan::run(capstan_test::opts(caps), [&] {
      struct Pair {
        mvar<long> there, back;
        std::atomic<long> hops{0};
      };
      std::vector<std::unique_ptr<Pair>> pairs;
      std::vector<thread_id> threads;
      for (unsigned i = 0; i < kPairs; ++i) {
        pairs.push_back(std::make_unique<Pair>());
        Pair& p = *pairs.back();
        threads.push_back(fork_on(i % caps, [&p, &killed] {
          try {
            for (long v = 0;; ++v) {
              p.there.put(v);
              v = p.back.take();
              p.hops.fetch_add(1, std::memory_order_relaxed);
            }
          } catch (const thread_killed&) {
            killed.fetch_add(1);
            throw;
          }
        }));
        threads.push_back(fork_on((i + 1) % caps, [&p, &killed] {
          try {
            for (;;) p.back.put(p.there.take() + 1);
          } catch (const thread_killed&) {
            killed.fetch_add(1);
            throw;
          }
        }));
      }
      // The run's first throw, once every pair has started (a thread killed
      // before it starts never runs its handler) and the victim's has made
      // wait_hops hand-offs (a pair on main's capability needs main to
      // yield).
      for (auto& p : pairs)
        while (p->hops.load(std::memory_order_relaxed) == 0) yield();
      Pair& target = *pairs[victim / 2];
      for (int spins = 0; target.hops.load(std::memory_order_relaxed) < wait_hops && spins < 100000; ++spins)
        yield();
      first_hops += target.hops.load(std::memory_order_relaxed);
      kill_thread(threads[victim]);
      for (thread_id t : threads) kill_thread(t);
      for (thread_id t : threads) {
        while (state_of(t) == thread_state::running || state_of(t) == thread_state::blocked) yield();
        ASSERT_EQ(state_of(t), thread_state::died);
      }
    });
    ASSERT_EQ(killed.load(), static_cast<int>(2 * kPairs)) << "run " << run_no;
  }
  EXPECT_GT(first_hops, 0) << "no first throw met hand-offs in progress";
}

}  // namespace
