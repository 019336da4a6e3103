// stack_test.cpp - the stack arena and per-capability pools.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "storage/stack.hpp"

namespace {

using capstan::rts::StackArena;
using capstan::rts::StackPool;

std::size_t resident_pages(void* lo, std::size_t size) {
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec(size / page);
  if (mincore(lo, size, vec.data()) != 0) return SIZE_MAX;
  return static_cast<std::size_t>(std::count_if(vec.begin(), vec.end(), [](unsigned char c) { return c & 1; }));
}

TEST(StackArena, CarvesDistinctNonOverlappingStacksFromFewMappings) {
  StackArena arena;
  arena.configure(64 * 1024);
  std::set<char*> seen;
  for (int i = 0; i < 1000; ++i) {
    auto* s = static_cast<char*>(arena.allocate());
    ASSERT_TRUE(seen.insert(s).second);
  }
  for (auto it = seen.begin(); std::next(it) != seen.end(); ++it)
    ASSERT_GE(*std::next(it) - *it, static_cast<std::ptrdiff_t>(64 * 1024)) << "stacks overlap";
  // 1000 stacks in slabs of kSlabStacks: a handful of mappings, not 1000.
  EXPECT_LE(arena.mappings(), 1000 / StackArena::kSlabStacks + 1);
  EXPECT_EQ(arena.reserved_stacks(), 1000u);
  arena.release_all();
}

// Note [Stack colouring]: the tops threads start from fall at many
// different offsets within a page (so in different cache sets), each a
// whole number of lines below the stack's top, under 1 KiB (a 16th of the
// smallest stack); and a stack keeps its colour.
TEST(StackArena, ThreadsStartAtColouredTopsSpreadOverThePage) {
  for (std::size_t size : {std::size_t{16 * 1024}, std::size_t{256 * 1024}}) {
    SCOPED_TRACE(size);
    StackArena arena;
    arena.configure(size);
    const std::size_t colours = StackArena::kColours;
    std::set<std::size_t> offsets;
    for (int i = 0; i < 512; ++i) {
      auto* lo = static_cast<char*>(arena.allocate());
      ASSERT_NE(lo, nullptr);
      std::size_t start = arena.start_size(lo);
      EXPECT_EQ(start, arena.start_size(lo));  // a property of the stack
      ASSERT_LE(start, arena.size());  // size rounded up to pages
      std::size_t colour = arena.size() - start;
      EXPECT_EQ(colour % StackArena::kColourBytes, 0u) << colour;
      EXPECT_LT(colour, std::size_t{1024}) << colour;
      offsets.insert(reinterpret_cast<std::uintptr_t>(lo + start) % 4096);
    }
    // Uncoloured, every top is at offset 0.  512 stacks over `colours`
    // colours: the addresses differ from run to run, but a hash of 512 of
    // them misses a quarter of 16 colours about never.
    EXPECT_GE(offsets.size(), colours * 3 / 4) << "of " << colours;
    arena.release_all();
  }
}

TEST(StackArena, ReservingCostsNoMemoryUntilTouched) {
  StackArena arena;
  arena.configure(1024 * 1024);
  auto* s = static_cast<char*>(arena.allocate());
  EXPECT_EQ(resident_pages(s, 1024 * 1024), 0u);
  s[1024 * 1024 - 1] = 1;  // touch the top page only
  EXPECT_EQ(resident_pages(s, 1024 * 1024), 1u);
  arena.release_all();
}

TEST(StackArena, EveryStackHasAGuardPageBelowIt) {
  StackArena arena;
  arena.configure(64 * 1024);
  auto* s = static_cast<char*>(arena.allocate());
  ASSERT_NE(arena.guard_mode(), StackArena::GuardMode::none);
  EXPECT_EQ(arena.guarded(), arena.guard_mode() == StackArena::GuardMode::madvise_guard
                                 ? StackArena::kSlabStacks
                                 : 1u);
  EXPECT_TRUE(arena.is_guard_page(s - 1, s));
  EXPECT_FALSE(arena.is_guard_page(s, s));
  EXPECT_DEATH({ s[-100] = 1; }, "");  // writing into the guard faults
  arena.release_all();
}

// Note [Installing a slab's guards at once]: one process_madvise installs
// a whole slab's guards (or madvise does, one by one, where it cannot).
// Every stack's guard is checked, not the first one's only: the kernel
// reading a guard page on our behalf must fail with EFAULT.
TEST(StackArena, EveryStackOfASlabHasItsGuard) {
  StackArena arena;
  arena.configure(64 * 1024);
  if (arena.allocate(), arena.guard_mode() != StackArena::GuardMode::madvise_guard) {
    arena.release_all();
    GTEST_SKIP() << "no guard regions on this kernel: mprotect guards are tested above";
  }
  std::vector<char*> stacks;
  for (std::size_t i = 1; i < StackArena::kSlabStacks; ++i)
    stacks.push_back(static_cast<char*>(arena.allocate()));
  EXPECT_EQ(arena.mappings(), 1u);
  EXPECT_EQ(arena.guarded(), StackArena::kSlabStacks);
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK), 0);
  int unguarded = 0;
  for (char* s : stacks) {
    errno = 0;
    if (!(write(fds[1], s - 1, 1) < 0 && errno == EFAULT)) ++unguarded;
    char c;
    while (read(fds[0], &c, 1) == 1) {
    }
  }
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(unguarded, 0) << "stacks of the slab without a guard page below them";
  arena.release_all();
}

// Note [Releasing stacks in runs]: a batch of neighbours is released with
// one madvise over the run, guard pages included.  The guards must survive
// it, and a stack between two released ones that is still in use must keep
// its memory.
TEST(StackArena, ReleasingARunKeepsTheGuardsBetween) {
  StackArena arena;
  arena.configure(64 * 1024);
  std::vector<char*> stacks;
  for (int i = 0; i < 9; ++i) stacks.push_back(static_cast<char*>(arena.allocate()));
  std::sort(stacks.begin(), stacks.end());
  for (char* s : stacks) std::memset(s, 1, 64 * 1024);
  // Give back 0-3 and 5-8, in a shuffled order; 4 stays in use.
  std::vector<void*> back{stacks[7], stacks[1], stacks[3], stacks[0], stacks[8],
                          stacks[2], stacks[6], stacks[5]};
  arena.give_back(back.data(), back.size());
  for (int i = 0; i < 9; ++i) {
    if (i == 4) {
      EXPECT_EQ(resident_pages(stacks[i], 64 * 1024),
                64 * 1024 / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)))
          << "a stack in use lost memory";
      EXPECT_EQ(stacks[i][100], 1);
    } else {
      EXPECT_EQ(resident_pages(stacks[i], 64 * 1024), 0u) << "stack " << i << " kept its memory";
    }
  }
  // Every guard between the released stacks still faults (madvise guards
  // and mprotect'ed ones alike: the first stacks of a run get either).
  ASSERT_NE(arena.guard_mode(), StackArena::GuardMode::none);
  for (int i = 1; i < 9; ++i) {
    char* s = stacks[i];
    EXPECT_DEATH({ s[-100] = 1; }, "") << "guard below stack " << i << " was lost";
  }
  arena.release_all();
}

TEST(StackPool, ReusesTheHottestStackFirst) {
  StackArena arena;
  arena.configure(64 * 1024);
  StackPool pool;
  pool.attach(&arena, 4);
  void* a = pool.get();
  void* b = pool.get();
  pool.put(a);
  pool.put(b);
  EXPECT_EQ(pool.get(), b);
  EXPECT_EQ(pool.get(), a);
  arena.release_all();
}

TEST(StackPool, ReturnsMemoryOfIdleStacksBeyondTheWatermark) {
  StackArena arena;
  arena.configure(64 * 1024);
  StackPool pool;
  const std::size_t watermark = 8;
  pool.attach(&arena, watermark);
  std::vector<char*> stacks;
  for (int i = 0; i < 100; ++i) {
    auto* s = static_cast<char*>(pool.get());
    std::memset(s, 1, 64 * 1024);  // fully resident
    stacks.push_back(s);
  }
  for (char* s : stacks) pool.put(s);
  // Busy: bounded by kBusyFactor x the watermark (Note [Trimming when idle]).
  EXPECT_LE(pool.pooled(), StackPool::kBusyFactor * watermark + 16);
  EXPECT_LT(pool.pooled(), stacks.size());
  pool.trim_idle();  // the capability fell idle
  EXPECT_LE(pool.pooled(), watermark);
  arena.release_warm();  // the whole runtime fell idle (the ticker does this)
  std::size_t resident = 0;
  for (char* s : stacks) resident += resident_pages(s, 64 * 1024) > 0 ? 1 : 0;
  EXPECT_LE(resident, watermark) << "idle stacks beyond the watermark kept their memory";
  // Released stacks are reused (with their guard) before new ones are carved.
  auto carved = arena.reserved_stacks();
  for (int i = 0; i < 100; ++i) pool.get();
  EXPECT_EQ(arena.reserved_stacks(), carved);
  arena.release_all();
}

}  // namespace
