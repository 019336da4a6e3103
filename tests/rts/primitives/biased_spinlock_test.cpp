// biased_spinlock_test.cpp - BiasedSpinLock (Note [Biased spin locks] in
// primitives/biased_spinlock.hpp): the owner goes in without the shared
// word, a visitor waits for it and takes the word, the bias comes back
// when the visitors leave, and owner and visitors never hold it at once.
// The lock is used here without a runtime: one test thread plays the
// owner (lock(true)), as the capability's holder does.
#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "primitives/biased_spinlock.hpp"
#include "primitives/sanitizer.hpp"

namespace {

using capstan::rts::BiasedSpinLock;

// A biased lock needs membarrier (a run registers the process; so do
// these tests), and ThreadSanitizer cannot see the fence the protocol
// rests on (the runtime never biases a lock under it).
bool can_bias() {
  return !capstan::rts::san::tsan() &&
         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

#define NEED_BIAS()                                                                   \
  if (!can_bias()) GTEST_SKIP() << "needs membarrier and no ThreadSanitizer (biased " \
                                   "locks are off there)"

TEST(BiasedSpinLock, TheOwnerGoesInWithoutTheSharedWordAndTheBiasComesBack) {
  NEED_BIAS();
  BiasedSpinLock l;
  l.bias(true);
  l.lock(true);
  EXPECT_FALSE(l.word_held()) << "the owner, alone, took the shared word";
  l.unlock();

  std::thread v([&] {
    l.lock(false);
    EXPECT_TRUE(l.word_held()) << "a visitor holds the shared word";
    EXPECT_EQ(l.visitors(), 1u);
    l.unlock();
  });
  v.join();
  EXPECT_EQ(l.visitors(), 0u) << "the visitor left its count behind";
  EXPECT_FALSE(l.word_held());

  l.lock(true);
  EXPECT_FALSE(l.word_held()) << "the bias did not come back after the visitor left";
  l.unlock();
}

// A visitor that arrives while the owner is inside waits for it; an owner
// that arrives while a visitor is inside waits for the visitor.
TEST(BiasedSpinLock, OwnerAndVisitorWaitForEachOther) {
  NEED_BIAS();
  BiasedSpinLock l;
  l.bias(true);
  std::atomic<bool> visitor_in{false}, release{false}, owner_in{false};

  l.lock(true);
  std::thread v([&] {
    l.lock(false);
    visitor_in.store(true);
    while (!release.load()) std::this_thread::yield();
    l.unlock();
  });
  while (l.visitors() == 0) std::this_thread::yield();  // counted in, waiting
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(visitor_in.load()) << "the visitor entered while the owner was inside";
  l.unlock();
  while (!visitor_in.load()) std::this_thread::yield();

  std::thread o([&] {
    l.lock(true);  // a visitor is counted: backs off to the shared word
    owner_in.store(true);
    EXPECT_TRUE(l.word_held()) << "the owner entered beside a visitor without the word";
    l.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(owner_in.load()) << "the owner entered while the visitor was inside";
  release.store(true);
  v.join();
  o.join();
  EXPECT_TRUE(owner_in.load());
  EXPECT_EQ(l.visitors(), 0u);
  EXPECT_FALSE(l.word_held());
}

// Without bias nobody is an owner: every lock takes the word.
TEST(BiasedSpinLock, UnbiasedItIsASpinLock) {
  BiasedSpinLock l;
  l.lock(false);
  EXPECT_TRUE(l.word_held());
  EXPECT_EQ(l.visitors(), 0u) << "an unbiased lock counted a visitor";
  l.unlock();
  EXPECT_FALSE(l.word_held());
}

// One owner thread and three visitors bump a plain counter under the lock,
// the owner mostly, the visitors at random moments; a section that two
// entered at once loses an increment (and is seen by the `inside` count).  Between rounds the owner role
// passes to a fresh thread (as a capability passes between Tasks).
TEST(BiasedSpinLock, OwnerAndVisitorsNeverOverlap) {
  NEED_BIAS();
  BiasedSpinLock l;
  l.bias(true);
  long count = 0;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  // A section lasts `spins` turns: the owner's vary, so that a visitor
  // that came in wrongly would find it inside.
  auto section = [&](unsigned spins) {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlap.store(true);
    long c = count;
    for (; spins > 0; --spins) asm volatile("" ::: "memory");
    count = c + 1;
    inside.fetch_sub(1, std::memory_order_relaxed);
  };
  constexpr int kRounds = 20;
  constexpr long kOwnerOps = 20000, kVisitorOps = 200;
  constexpr int kVisitors = 3;
  std::random_device rd;
  unsigned seed = rd();
  for (int round = 0; round < kRounds; ++round) {
    std::thread owner([&] {
      std::mt19937 rng(seed + static_cast<unsigned>(round));
      for (long i = 0; i < kOwnerOps; ++i) {
        // Now and then a long one (tens of microseconds): longer than a
        // visitor's membarrier, so one that did not wait would come in.
        unsigned spins = rng() % 64 == 0 ? 50000 : rng() % 256;
        l.lock(true);
        section(spins);
        l.unlock();
      }
    });
    std::vector<std::thread> visitors;
    for (int v = 0; v < kVisitors; ++v) {
      visitors.emplace_back([&, v] {
        std::mt19937 rng(seed + static_cast<unsigned>(round * 8 + v));
        for (long i = 0; i < kVisitorOps; ++i) {
          for (unsigned spin = rng() % 2000; spin > 0; --spin) asm volatile("" ::: "memory");
          l.lock(false);
          section(0);
          l.unlock();
        }
      });
    }
    owner.join();
    for (auto& t : visitors) t.join();
  }
  EXPECT_FALSE(overlap.load()) << "two holders at once (seed " << seed << ")";
  EXPECT_EQ(count, kRounds * (kOwnerOps + kVisitors * kVisitorOps)) << "seed " << seed;
  EXPECT_EQ(l.visitors(), 0u);
}

}  // namespace
