// stack_pool_test.cpp - white-box tests of the flow of stacks between
// capabilities' StackPools and the shared StackArena (Note [Trimming when
// idle]): a pool keeps its hottest stacks, a busy pool past its bound parks
// the excess warm for any capability, an allocation takes warm stacks
// before carving, and no stack is ever handed out twice.  (The arena's
// carving and guards are in stack_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "capstan_test.hpp"
#include "storage/stack.hpp"
#include "white_box.hpp"

namespace {

using capstan::rts::StackArena;
using capstan::rts::StackPool;
using capstan_test::kScale;
using capstan_test::Rng;

constexpr std::size_t kStack = 16 * 1024;

TEST(StackPools, TrimmingWhenIdleKeepsTheMostRecentlyUsedStacks) {
  StackArena arena;
  arena.configure(kStack);
  StackPool pool;
  const std::size_t watermark = 4;
  pool.attach(&arena, watermark);
  std::vector<void*> stacks;
  for (int i = 0; i < 20; ++i) stacks.push_back(pool.get());
  for (void* s : stacks) pool.put(s);
  pool.trim_idle();
  ASSERT_EQ(pool.pooled(), watermark);
  for (std::size_t i = 0; i < watermark; ++i)
    EXPECT_EQ(pool.get(), stacks[stacks.size() - 1 - i]) << "the pool kept a cold stack";
  arena.release_all();
}

// At -N2 one capability often finishes the threads the other forks: the
// finisher's pool overflows into the warm list, and the forker's next
// allocations take those stacks back before carving new ones.
TEST(StackPools, StacksFinishedElsewhereComeBackWarmBeforeNewOnesAreCarved) {
  StackArena arena;
  arena.configure(kStack);
  StackPool forker, finisher;
  const std::size_t watermark = 4;
  forker.attach(&arena, watermark);
  finisher.attach(&arena, watermark);
  const std::size_t bound = StackPool::kBusyFactor * watermark + 16;
  std::vector<void*> made;
  for (std::size_t i = 0; i < 4 * bound; ++i) made.push_back(forker.get());
  std::set<void*> made_set(made.begin(), made.end());
  ASSERT_EQ(made_set.size(), made.size()) << "a stack handed out twice";
  for (void* s : made) finisher.put(s);
  EXPECT_LE(finisher.pooled(), bound) << "a busy pool grew past its bound";
  std::size_t parked = made.size() - finisher.pooled();
  ASSERT_GT(parked, 0u);
  // The forker takes as many stacks as were parked: the arena hands out
  // every warm stack before it carves a new one.
  auto carved = arena.reserved_stacks();
  std::size_t before = forker.pooled();
  std::set<void*> back;
  for (std::size_t i = 0; i < before + parked; ++i) {
    void* s = forker.get();
    ASSERT_TRUE(back.insert(s).second) << "a stack handed out twice";
  }
  // Taken from the arena: what we got beyond the leftover, plus what the
  // last batch left in the pool.  Only what the warm list could not cover
  // may have been carved.
  std::size_t from_arena = parked + forker.pooled();
  EXPECT_EQ(arena.reserved_stacks() - carved, from_arena - parked)
      << "carved new stacks while warm ones waited";
  arena.release_all();
}

// Capabilities on OS threads allocate, free, and free each other's stacks
// (a thread finishing elsewhere); a ticker-like thread releases the warm
// list meanwhile.  No stack is held by two parties, and every stack handed
// out is usable over its whole length.
TEST(StackPools, ConcurrentPoolsNeverHandOutAStackTwice) {
  constexpr int kCaps = 3;
  const int ops = 20000 / kScale;
  StackArena arena;
  arena.configure(kStack);
  std::mutex mu;              // guards live and handed
  std::set<void*> live;
  std::deque<void*> handed;
  std::atomic<int> twice{0}, running{kCaps};
  std::vector<std::thread> caps;
  for (int c = 0; c < kCaps; ++c) {
    caps.emplace_back([&, c] {
      StackPool pool;
      pool.attach(&arena, 2);
      std::vector<void*> mine;
      Rng rng(static_cast<std::uint64_t>(c) + 61);
      for (int i = 0; i < ops; ++i) {
        unsigned what = rng.below(10);
        if (what < 5 || mine.empty()) {
          auto* s = static_cast<char*>(pool.get());
          s[0] = static_cast<char>(c);  // both ends: a write TSan and ASan can see
          s[kStack - 1] = static_cast<char>(c);
          std::lock_guard<std::mutex> g(mu);
          if (!live.insert(s).second) twice.fetch_add(1);
          mine.push_back(s);
        } else if (what < 7) {
          std::lock_guard<std::mutex> g(mu);
          handed.push_back(mine.back());
          mine.pop_back();
        } else {
          void* s;
          {
            std::lock_guard<std::mutex> g(mu);
            if (!handed.empty() && what < 9) {
              s = handed.front();
              handed.pop_front();
            } else {
              s = mine.back();
              mine.pop_back();
            }
            live.erase(s);
          }
          pool.put(s);
          if (what == 9) pool.trim_idle();
        }
      }
      running.fetch_sub(1);
    });
  }
  std::thread ticker([&] {
    while (running.load() != 0) {
      arena.release_warm();
      std::this_thread::yield();
    }
  });
  for (auto& t : caps) t.join();
  ticker.join();
  EXPECT_EQ(twice.load(), 0) << "a stack was handed out while another party held it";
  arena.release_all();
}

}  // namespace
