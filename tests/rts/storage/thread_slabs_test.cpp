// thread_slabs_test.cpp - white-box tests of where Thread objects come
// from: the shared ThreadDepot (slabs and batches) and the per-capability
// ThreadCache in front of it.  A cache that grows past 2*kBatch spills a
// batch to the depot, an empty cache refills from the depot before a new
// slab is carved, and no Thread is ever handed out twice.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "capstan_test.hpp"
#include "storage/thread_slabs.hpp"
#include "white_box.hpp"

namespace {

using capstan::rts::Thread;
using capstan::rts::ThreadCache;
using capstan::rts::ThreadDepot;
using capstan_test::kScale;
using capstan_test::Rng;

constexpr std::size_t kBatch = ThreadDepot::kBatch;

TEST(ThreadSlabs, ACacheHandsOutDistinctUnlinkedThreads) {
  ThreadDepot depot;
  ThreadCache cache(&depot);
  std::set<Thread*> seen;
  for (std::size_t i = 0; i < 5 * ThreadDepot::kSlab + 3; ++i) {
    Thread* t = cache.get();
    ASSERT_TRUE(seen.insert(t).second) << "handed out twice";
    ASSERT_EQ(t->link, nullptr);
  }
  depot.release_all();
}

TEST(ThreadSlabs, RecycledThreadsAreReusedBeforeNewOnesAreCarved) {
  ThreadDepot depot;
  ThreadCache cache(&depot);
  const std::size_t n = 16 * ThreadDepot::kSlab;  // whole slabs: the cache ends empty
  std::vector<Thread*> first;
  for (std::size_t i = 0; i < n; ++i) first.push_back(cache.get());
  for (Thread* t : first) cache.put(t);  // spills batches past 2*kBatch
  std::set<Thread*> old(first.begin(), first.end()), again;
  for (std::size_t i = 0; i < n; ++i) {
    Thread* t = cache.get();
    ASSERT_TRUE(old.count(t)) << "carved a new Thread while " << n - i << " recycled ones waited";
    ASSERT_TRUE(again.insert(t).second) << "handed out twice";
  }
  depot.release_all();
}

// A capability that finishes many threads made elsewhere spills them to the
// depot; another capability's empty cache takes that batch back.
TEST(ThreadSlabs, PastTheLimitABatchSpillsToTheDepotAndAnotherCacheTakesIt) {
  ThreadDepot depot;
  ThreadCache maker(&depot), finisher(&depot), other(&depot);
  std::vector<Thread*> made;
  for (std::size_t i = 0; i < 2 * kBatch + 1; ++i) made.push_back(maker.get());
  std::set<Thread*> made_set(made.begin(), made.end());
  for (Thread* t : made) finisher.put(t);  // the last put passes 2*kBatch: spill
  // The spilled batch is the most recently put kBatch threads.
  std::set<Thread*> spilled(made.end() - kBatch, made.end());
  std::set<Thread*> got;
  for (std::size_t i = 0; i < kBatch; ++i) {
    Thread* t = other.get();
    ASSERT_TRUE(spilled.count(t)) << "thread " << i << " did not come from the spilled batch";
    ASSERT_TRUE(got.insert(t).second);
  }
  Thread* fresh = other.get();  // the depot is empty now: a new slab
  EXPECT_FALSE(made_set.count(fresh));
  // What the finisher kept is the rest, none of it handed to `other`.
  for (std::size_t i = 0; i < kBatch + 1; ++i) {
    Thread* t = finisher.get();
    ASSERT_TRUE(made_set.count(t) && !spilled.count(t));
  }
  depot.release_all();
}

// Capabilities on OS threads make threads, pass some to others to finish
// (put into the finisher's cache), in random order: a Thread is never held
// by two parties at once.
TEST(ThreadSlabs, ConcurrentCachesNeverHandOutAThreadTwice) {
  constexpr int kCaps = 4;
  const int ops = 40000 / kScale;
  ThreadDepot depot;
  std::mutex mu;                // guards live and handed
  std::set<Thread*> live;       // handed out, not yet put back
  std::deque<Thread*> handed;   // made on one capability, finished on another
  std::atomic<int> twice{0};
  std::vector<std::thread> caps;
  for (int c = 0; c < kCaps; ++c) {
    caps.emplace_back([&, c] {
      ThreadCache cache(&depot);
      std::vector<Thread*> mine;
      Rng rng(static_cast<std::uint64_t>(c) + 51);
      for (int i = 0; i < ops; ++i) {
        unsigned what = rng.below(10);
        if (what < 5 || mine.empty()) {
          Thread* t = cache.get();
          t->id = static_cast<std::uint64_t>(c);  // a write: TSan sees two owners
          std::lock_guard<std::mutex> g(mu);
          if (!live.insert(t).second) twice.fetch_add(1);
          mine.push_back(t);
        } else if (what < 7) {
          Thread* t = mine.back();
          mine.pop_back();
          std::lock_guard<std::mutex> g(mu);
          handed.push_back(t);
        } else {
          Thread* t = nullptr;
          {
            std::lock_guard<std::mutex> g(mu);
            if (!handed.empty() && what < 9) {
              t = handed.front();
              handed.pop_front();
            } else {
              t = mine.back();
              mine.pop_back();
            }
            live.erase(t);
          }
          t->id = 0;
          cache.put(t);
        }
      }
      std::lock_guard<std::mutex> g(mu);
      for (Thread* t : mine) live.erase(t);  // dropped with the cache (the depot owns them)
    });
  }
  for (auto& t : caps) t.join();
  EXPECT_EQ(twice.load(), 0) << "a Thread was handed out while another party held it";
  depot.release_all();
}

}  // namespace
