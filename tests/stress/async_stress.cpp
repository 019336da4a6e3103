// async_stress.cpp - parents running random race / concurrently /
// map_concurrently / async compositions of random blocking children,
// while a killer kills random parents, across capabilities: whatever ends
// an operation (a result, a child's exception, the parent's kill), every
// child it started has finished by the time it returns or unwinds, and
// nothing hangs (Note [Async threads]).
#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

#include "stress.hpp"

namespace {

using namespace capstan;

class AsyncStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, AsyncStress, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

struct shared_state {
  mvar<int> never;
  chan<int> quiet;
};

// live counts a parent's children that have started and not yet unwound.
struct alive {
  std::atomic<int>* n;
  explicit alive(std::atomic<int>* c) : n(c) { n->fetch_add(1); }
  ~alive() { n->fetch_sub(1); }
};

// child: a random finite action: return, yield, sleep, time out on an
// mvar or a chan, or throw; with `may_block`, possibly block forever
// (only where something else will end the operation).
int child(std::uint64_t s, std::atomic<int>* live, shared_state& sh, bool may_block) {
  alive a(live);
  std::mt19937_64 rng(s);
  switch (rng() % (may_block ? 8 : 7)) {
    case 0: return 1;
    case 1: for (int i = 0; i < 3; ++i) yield(); return 2;
    case 2: sleep_for(std::chrono::microseconds(rng() % 200)); return 3;
    case 3: return sh.never.take_for(std::chrono::microseconds(rng() % 200)).value_or(4);
    case 4: return sh.quiet.read_for(std::chrono::microseconds(rng() % 200)).value_or(5);
    case 5: if (rng() % 4 == 0) throw std::runtime_error("child"); return 6;
    case 6: return mask([&] { return sh.never.take_for(std::chrono::microseconds(rng() % 100)).value_or(7); });
    default: return sh.never.take();  // blocks until cancelled
  }
}

void one_op(std::mt19937_64& rng, std::atomic<int>* live, shared_state& sh) {
  auto seed = [&] { return rng(); };
  switch (rng() % 5) {
    case 0: {  // one side may block forever: the other finishes
      std::uint64_t s1 = seed(), s2 = seed();
      race([&] { return child(s1, live, sh, false); }, [&] { return child(s2, live, sh, true); });
      break;
    }
    case 1: {
      std::uint64_t s1 = seed(), s2 = seed();
      concurrently([&] { return child(s1, live, sh, false); }, [&] { return child(s2, live, sh, false); });
      break;
    }
    case 2: {
      std::vector<std::uint64_t> seeds(rng() % 8);
      for (auto& s : seeds) s = seed();
      map_concurrently(seeds, [&](std::uint64_t s) { return child(s, live, sh, false); });
      break;
    }
    case 3: {  // abandoned: the destructor cancels, blocked or not
      std::uint64_t s1 = seed();
      async a([&] { return child(s1, live, sh, true); });
      if (rng() % 2) yield();
      break;
    }
    default: {
      std::uint64_t s1 = seed();
      async a([&] { return child(s1, live, sh, false); });
      if (rng() % 3 == 0) a.cancel();
      try {
        a.wait();
      } catch (const thread_killed&) {
      }
      break;
    }
  }
}

TEST_P(AsyncStress, NoChildOutlivesItsOperation) {
  stress::Watchdog dog(std::chrono::seconds(120), "async compositions under kills");
  constexpr int kParents = 6;
  const int kOps = 10000 / static_cast<int>(stress::kScale);
  std::atomic<long> leaked{0}, kills{0}, errors{0};
  run(capstan_test::opts(GetParam(), std::chrono::microseconds(1000)), [&] {
    shared_state sh;
    std::vector<thread_id> parents;
    for (int p = 0; p < kParents; ++p)
      parents.push_back(fork_io([&, p] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(p));
        std::atomic<int> live{0};
        // Masked between operations, so a kill lands inside one (at the
        // restore, or in the operation) and not in the bookkeeping.
        try {
          mask([&](mask_restore restore) {
            for (int i = 0; i < kOps; ++i) {
              try {
                restore([&] { one_op(rng, &live, sh); });
              } catch (const thread_killed&) {
                kills.fetch_add(1);
              } catch (const std::runtime_error&) {
                errors.fetch_add(1);
              }
              if (live.load() != 0) leaked.fetch_add(1);
            }
          });
        } catch (const thread_killed&) {
          // raised as the mask ended, after the last operation
        }
      }));
    // Wait on the parents' states, not on a count they keep: a parent
    // killed before its first run never runs its body (as in GHC), so it
    // could never count itself.
    auto any_parent_left = [&] {
      for (thread_id t : parents)
        if (thread_state s = state_of(t); s != thread_state::finished && s != thread_state::died) return true;
      return false;
    };
    std::mt19937_64 rng(stress::seed() + 100);
    while (any_parent_left()) {
      sleep_for(std::chrono::microseconds(rng() % 500));
      kill_thread(parents[rng() % kParents]);
    }
  });
  EXPECT_EQ(leaked.load(), 0) << "an operation returned while a child still ran";
  EXPECT_GT(kills.load(), 0);
  std::fprintf(stderr, "kills %ld, child exceptions %ld\n", kills.load(), errors.load());
}

}  // namespace
