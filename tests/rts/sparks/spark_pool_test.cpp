// spark_pool_test.cpp - white-box tests of a capability's spark pool
// (Note [Spark pools]): the owner's order, overflow at +RTS -e, the steal
// request/answer protocol, and GHC's accounting of every spark.
//
// The owner tests run inside a one-capability runtime and look at the pool
// from its main thread.  The protocol tests drive two hand-made
// capabilities from two OS threads, the victim's owner and a thief, with no
// runtime running.
#include <gtest/gtest.h>
#include <sched.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "capstan_test.hpp"
#include "white_box.hpp"
#include "runtime/runtime.hpp"
#include "sparks/sparks.hpp"
#include "task/handover.hpp"

namespace {

using capstan::spark;
using capstan::detail::spark_base;
using capstan::detail::spark_pool;
using capstan::rts::Capability;
using capstan::rts::rt;
using capstan::rts::Task;
using capstan_test::kScale;
using capstan_test::Rng;
using capstan_test::spin;

// A spark<R> is its spark_base (its only base), at the same address.
const void* addr(const void* s) { return s; }
const void* slot(const spark_pool* p, std::uint64_t i) { return p->slots[i & p->mask]; }

std::uint64_t counter(const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); }

// expect_sparks checks the last run's SPARKS line, category by category,
// and that the categories add up.
void expect_sparks(std::uint64_t created, std::uint64_t converted, std::uint64_t fizzled,
                   std::uint64_t gcd) {
  auto st = capstan::statistics().sparks;
  EXPECT_EQ(st.created, created);
  EXPECT_EQ(st.converted, converted);
  EXPECT_EQ(st.fizzled, fizzled);
  EXPECT_EQ(st.gcd, gcd);
  EXPECT_EQ(st.created, st.converted + st.fizzled + st.gcd);
}

capstan::options one_cap(std::size_t pool_size = 64) {
  capstan::options o = capstan_test::opts(1);
  o.spark_pool_size = pool_size;
  return o;
}

// --- the owner's view, inside a runtime --------------------------------------

TEST(SparkPoolOwner, ParPushesOnTopAndGetTakesTheNewestWithoutTouchingTheRest) {
  capstan::run(one_cap(), [] {
    spark_pool* p = capstan::detail::tl_here.pool;
    ASSERT_EQ(p, &rt.caps[0]->sparks);
    std::uint64_t b0 = p->bottom.load();
    ASSERT_EQ(p->top.load(), b0);
    auto a = capstan::par([] { return 1; });
    auto b = capstan::par([] { return 2; });
    auto c = capstan::par([] { return 3; });
    ASSERT_EQ(p->top.load(), b0 + 3);
    EXPECT_EQ(slot(p, b0), addr(&a));
    EXPECT_EQ(slot(p, b0 + 1), addr(&b));
    EXPECT_EQ(slot(p, b0 + 2), addr(&c));
    EXPECT_EQ(c.get(), 3);  // the newest: popped from the top
    EXPECT_EQ(p->top.load(), b0 + 2);
    EXPECT_EQ(p->bottom.load(), b0);
    EXPECT_EQ(a.get(), 1);  // the oldest: taken from the bottom end
    EXPECT_EQ(p->bottom.load(), b0 + 1);
    EXPECT_EQ(slot(p, p->bottom.load()), addr(&b));
    EXPECT_EQ(b.get(), 2);
    EXPECT_EQ(p->size(), 0u);
    EXPECT_EQ(counter(p->fizzled), 3u);
  });
}

// Forcing a spark out of the middle leaves a hole: the idle capability's
// take (find_spark) skips it, and a hole reaching the bottom end is dropped
// at once.
TEST(SparkPoolOwner, HolesAreSkippedByTheOldestFirstTakeAndDroppedAtTheBottom) {
  capstan::run(one_cap(), [] {
    Capability* cap = rt.caps[0];
    spark_pool* p = &cap->sparks;
    std::uint64_t b0 = p->bottom.load();
    auto a = capstan::par([] { return 1; });
    auto b = capstan::par([] { return 2; });
    auto c = capstan::par([] { return 3; });
    auto d = capstan::par([] { return 4; });
    auto e = capstan::par([] { return 5; });
    EXPECT_EQ(b.get(), 2);
    EXPECT_EQ(slot(p, b0 + 1), nullptr) << "a spark forced out of the middle leaves a hole";
    EXPECT_EQ(p->size(), 5u);
    EXPECT_EQ(a.get(), 1);  // the bottom: removed, and the hole above it goes too
    EXPECT_EQ(p->bottom.load(), b0 + 2);
    EXPECT_EQ(slot(p, b0 + 2), addr(&c));
    EXPECT_EQ(d.get(), 4);  // another hole, between c and e
    spark_base* s1 = capstan::rts::find_spark(cap);
    spark_base* s2 = capstan::rts::find_spark(cap);
    EXPECT_EQ(addr(s1), addr(&c));
    EXPECT_EQ(addr(s2), addr(&e)) << "the oldest-first take did not skip the hole";
    EXPECT_EQ(p->size(), 0u);
    EXPECT_EQ(capstan::rts::find_spark(cap), nullptr);
    capstan::rts::start_spark_thread(cap, s1);
    capstan::rts::start_spark_thread(cap, s2);
    EXPECT_EQ(e.get(), 5);
    EXPECT_EQ(c.get(), 3);
  });
  auto st = capstan::statistics().sparks;
  EXPECT_EQ(st.created, 5u);
  EXPECT_EQ(st.converted, 2u);
  EXPECT_EQ(st.fizzled, 3u);
}

TEST(SparkPoolOwner, OverflowsAtTheConfiguredSizeRoundedUpToAPowerOfTwo) {
  capstan::options o = one_cap();
  o.parse_flags("-e5");
  ASSERT_EQ(o.spark_pool_size, 5u);
  capstan::run(o, [] {
    spark_pool* p = capstan::detail::tl_here.pool;
    ASSERT_EQ(p->mask, 7u) << "-e5 holds 8 sparks";
    std::vector<std::unique_ptr<spark<int>>> s;
    for (int i = 0; i < 8; ++i) s.emplace_back(new spark<int>(capstan::par([i] { return i; })));
    EXPECT_EQ(p->size(), 8u);
    EXPECT_EQ(counter(p->overflowed), 0u);
    auto extra = capstan::par([] { return 100; });  // full: dropped, runs inline in get()
    EXPECT_EQ(counter(p->overflowed), 1u);
    EXPECT_EQ(p->size(), 8u);
    EXPECT_EQ(counter(p->created), 8u);
    EXPECT_EQ(extra.get(), 100);
    EXPECT_EQ(counter(p->fizzled), 0u) << "an overflowed spark is not a fizzled one";
    EXPECT_EQ(s.back()->get(), 7);  // makes room
    auto fits = capstan::par([] { return 200; });
    EXPECT_EQ(counter(p->overflowed), 1u);
    EXPECT_EQ(slot(p, p->top.load() - 1), addr(&fits));
    EXPECT_EQ(fits.get(), 200);
    for (int i = 6; i >= 0; --i) EXPECT_EQ(s[static_cast<std::size_t>(i)]->get(), i);
  });
  auto st = capstan::statistics().sparks;
  EXPECT_EQ(st.created, 9u);
  EXPECT_EQ(st.overflowed, 1u);
  EXPECT_EQ(st.fizzled, 9u);
  EXPECT_EQ(st.total(), 10u);
}

// The largest pools +RTS -e accepts cost memory only for the slots a
// program reaches: 4 capabilities of 2^24 slots (128 MiB of ring each)
// made 512 MiB resident at start while the rings were zero-filled.  Not
// under the sanitizers, whose allocators and shadow touch what they map.
TEST(SparkPoolOwner, TheLargestPoolsCostOnlyTheSlotsUsed) {
  auto resident = [] {
    std::ifstream f("/proc/self/statm");
    long size = 0, pages = 0;
    f >> size >> pages;
    return pages * sysconf(_SC_PAGESIZE);
  };
  capstan::options o = one_cap();
  o.parse_flags("-N4 -e16777216");
  long before = resident();
  long during = 0;
  int sum = 0;
  capstan::run(o, [&] {
    ASSERT_EQ(capstan::detail::tl_here.pool->mask, (1u << 24) - 1);
    std::vector<std::unique_ptr<spark<int>>> s;
    for (int i = 0; i < 100000; ++i) s.emplace_back(new spark<int>(capstan::par([i] { return i & 1; })));
    for (auto& x : s) sum += x->get();
    during = resident();
  });
  EXPECT_EQ(sum, 50000);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(during - before, 64L << 20) << "resident growth with four 2^24-slot pools";
#else
  (void)before;
  (void)during;
#endif
}

// An idle capability (find_spark) takes the oldest spark; the maker's get()
// then waits for the spark thread that runs it.  One spark of each fate:
// created == converted + fizzled + GC'd, each counted exactly.
TEST(SparkPoolOwner, FindSparkTakesTheOldestAndEveryFateIsCountedOnce) {
  std::atomic<int> ran_b{0};
  capstan::run(one_cap(), [&] {
    Capability* cap = rt.caps[0];
    spark_pool* p = &cap->sparks;
    std::uint64_t b0 = p->bottom.load();
    auto a = capstan::par([] { return 1; });
    {
      auto b = capstan::par([&] { return ran_b.fetch_add(1) + 2; });
      auto c = capstan::par([] { return 3; });
      spark_base* oldest = capstan::rts::find_spark(cap);
      ASSERT_EQ(addr(oldest), addr(&a));
      EXPECT_EQ(oldest->state.load(), spark_base::stolen);
      EXPECT_EQ(p->bottom.load(), b0 + 1);
      EXPECT_EQ(c.get(), 3);  // fizzled
      capstan::rts::start_spark_thread(cap, oldest);
    }  // b dropped unforced: GC'd
    EXPECT_EQ(a.get(), 1);  // converted by the spark thread; we waited for it
  });
  EXPECT_EQ(ran_b.load(), 0) << "a discarded spark ran";
  expect_sparks(/*created=*/3, /*converted=*/1, /*fizzled=*/1, /*gcd=*/1);
}

// A spark thread that never got a stack (Note [Running out of stacks] in
// storage/stack.cpp) gives its sparks back: its first one, with the maker
// already waiting for it at the gate, and one from its capability's
// backlog.  The maker runs both itself (fizzled), exactly once; a given-back
// spark dropped unforced is GC'd; the accounting adds up.
TEST(SparkPoolOwner, ASparkThreadThatNeverRanGivesItsSparksBack) {
  std::atomic<int> runs{0};
  capstan::run(one_cap(), [&] {
    Capability* cap = rt.caps[0];
    auto a = capstan::par([&] { return runs.fetch_add(1) + 10; });
    auto b = capstan::par([&] { return runs.fetch_add(1) + 20; });
    {
      auto c = capstan::par([&] { return runs.fetch_add(1) + 30; });
      spark_base* first = capstan::rts::find_spark(cap);   // a, marked stolen
      spark_base* second = capstan::rts::find_spark(cap);  // b
      spark_base* third = capstan::rts::find_spark(cap);   // c
      ASSERT_EQ(addr(first), addr(&a));
      ASSERT_EQ(addr(second), addr(&b));
      ASSERT_EQ(addr(third), addr(&c));
      ASSERT_EQ(cap->n_stolen_sparks, 0u);
      cap->stolen_sparks[cap->n_stolen_sparks++] = second;  // the backlog
      cap->stolen_sparks[cap->n_stolen_sparks++] = third;
      // The spark thread's closure is one spark_base*: destroyed unrun, by
      // another green thread once we wait for `a` at its gate.
      spark_base* closure = first;
      std::atomic<bool> destroyed{false};
      capstan::fork_io([&] {
        while (first->state.load() != spark_base::stolen_waiting) capstan::yield();
        capstan::rts::spark_thread_ops.destroy(&closure);
        destroyed.store(true);
      });
      EXPECT_EQ(a.get(), 10) << "the waiting maker was not handed its spark back";
      EXPECT_TRUE(destroyed.load());
      EXPECT_EQ(cap->n_stolen_sparks, 0u) << "the backlog was left behind";
      EXPECT_EQ(third->state.load(), spark_base::unpooled);
    }  // c dropped unforced: GC'd, never run
    EXPECT_EQ(b.get(), 21);
    // A second get() is a usage_error (its value was moved out), not a
    // second run: `runs` below still counts two.
    EXPECT_THROW((void)b.get(), capstan::usage_error);
  });
  EXPECT_EQ(runs.load(), 2) << "a spark ran twice, or a dropped one ran";
  expect_sparks(/*created=*/3, /*converted=*/0, /*fizzled=*/2, /*gcd=*/1);
}

// Note [A backlog of stolen sparks is not speculative] (schedule/idle.cpp):
// a capability whose backlog holds a spark its maker waits for runs it at
// once, even with no CPU free to hunt on.  The process is narrowed to one
// CPU, so with capability 0 busy, idle capability 1 may not hunt (Note
// [Spinning only on a free CPU]); capability 1's thread takes its own spark
// as a thief's answer would leave it (marked stolen, in the backlog: the
// spark thread that would have drained it went elsewhere) and waits for it
// in get().  Before, capability 1 slept on its backlog, and the maker
// waited until deadlock detection raised it.
TEST(SparkPoolOwner, AnIdleCapabilityRunsItsBacklogWithoutAFreeCpu) {
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  capstan::options o = capstan_test::opts(2);
  o.deadlock_detection = capstan::options::deadlock::force;
  std::atomic<bool> ran{false};
  bool ran_while_busy = false, raised = false;
  int got = -1;
  capstan::run(o, [&] {
    capstan::mvar<int> done;
    capstan::fork_on(1, [&] {
      Capability* cap = rt.caps[1];
      auto s = capstan::par([&] {
        ran.store(true);
        return 7;
      });
      spark_base* taken = capstan::rts::find_spark(cap);  // marked stolen
      EXPECT_EQ(addr(taken), addr(&s));
      cap->stolen_sparks[cap->n_stolen_sparks++] = taken;
      try {
        got = s.get();
      } catch (const capstan::blocked_indefinitely&) {
        raised = true;
      }
      done.put(1);
    });
    // Busy, with safe points, for up to 2 s or until the spark has run.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!ran.load() && std::chrono::steady_clock::now() < until) {
      capstan_test::busy_work(50);
      capstan::yield_point();
    }
    ran_while_busy = ran.load();
    try {
      done.take();
    } catch (const capstan::blocked_indefinitely&) {
      raised = true;
    }
  });
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_TRUE(ran_while_busy) << "capability 1 slept on its backlog";
  EXPECT_FALSE(raised);
  EXPECT_EQ(got, 7);
}

// A spark given back to a maker that never forces nor drops it - its
// frame abandoned, as a maker still blocked after shutdown's grace period
// is - still ends in a category: GC'd, counted when the run ends.  The
// spark is built in storage that is never destroyed, which is what an
// abandoned stack is to it.
TEST(SparkPoolOwner, AGivenBackSparkThatIsNeverSettledCountsGcd) {
  std::atomic<int> runs{0};
  capstan::run(one_cap(), [&] {
    Capability* cap = rt.caps[0];
    auto make = [&] { return capstan::par([&] { return runs.fetch_add(1); }); };
    using S = decltype(make());
    alignas(S) static unsigned char storage[sizeof(S)];
    S* s = new (storage) S(make());  // never destroyed
    spark_base* first = capstan::rts::find_spark(cap);  // marked stolen
    ASSERT_EQ(addr(first), addr(s));
    spark_base* closure = first;
    capstan::rts::spark_thread_ops.destroy(&closure);  // a spark thread that never ran
    EXPECT_EQ(first->state.load(), spark_base::unpooled) << "the spark was not given back";
    auto live = capstan::statistics().sparks;
    EXPECT_EQ(live.gcd + live.fizzled + live.converted, 0u) << "settled before its maker did";
  });
  EXPECT_EQ(runs.load(), 0);
  expect_sparks(/*created=*/1, /*converted=*/0, /*fizzled=*/0, /*gcd=*/1);
}

// --- the steal protocol, on hand-made capabilities ----------------------------

// Two capabilities in rt (no runtime running): caps[0] is the victim whose
// owner is the OS thread that calls own_victim(); caps[1] is the thief.
class StealProtocol : public ::testing::Test {
 protected:
  capstan_test::WhiteBoxRuntime runtime_;  // first: outlives the rest
  void SetUp() override {
    ASSERT_FALSE(capstan::rts::process.running.load());
    // A finished run leaves shutting_down set (find_spark then finds nothing).
    was_shutting_down_ = rt.shutting_down.exchange(false);
    for (unsigned i = 0; i < 2; ++i) {
      caps_[i] = std::make_unique<Capability>();
      caps_[i]->no = i;
      capstan::rts::spark_pool_init(caps_[i].get(), 1024);
      rt.caps.push_back(caps_[i].get());
    }
    rt.n_caps = 2;
  }
  void TearDown() override {
    for (auto& c : caps_) capstan::rts::spark_pool_release(c.get());
    rt.caps.clear();
    rt.n_caps = 0;
    rt.shutting_down.store(was_shutting_down_);
    capstan::detail::tl_here = {};  // own_victim's take_capability set it
  }
  Capability* victim() { return caps_[0].get(); }
  Capability* thief() { return caps_[1].get(); }
  // Makes the calling OS thread the victim's owner: par() pushes there.
  void own_victim(Task* t) { capstan::rts::take_capability(t, victim()); }
  // What the thief's spark thread does with a spark it got: run, publish.
  static void run_stolen(spark_base* s) {
    s->run(s, false);  // as a spark thread does
    s->state.store(spark_base::done, std::memory_order_release);
  }
  std::unique_ptr<Capability> caps_[2];
  bool was_shutting_down_ = false;
};

TEST_F(StealProtocol, TheOwnerAnswersWithTheOldestSparkAndAQuarterOfTheRest) {
  Task owner;
  own_victim(&owner);
  std::vector<std::unique_ptr<spark<int>>> s;
  for (int i = 0; i < 20; ++i) s.emplace_back(new spark<int>(capstan::par([i] { return i; })));
  spark_pool* p = &victim()->sparks;
  p->request.store(thief());  // what the thief's ask() CASes in
  capstan::rts::poll_spark_requests(victim());
  EXPECT_EQ(p->request.load(), nullptr) << "the request was not consumed";
  spark_base* first = thief()->steal_box.load();
  ASSERT_EQ(addr(first), addr(s[0].get()));
  ASSERT_EQ(thief()->steal_batch_n, 19u / 4);
  for (unsigned i = 0; i < thief()->steal_batch_n; ++i)
    EXPECT_EQ(addr(thief()->steal_batch[i]), addr(s[i + 1].get()));
  EXPECT_EQ(p->size(), 20u - 5);
  EXPECT_EQ(first->state.load(), spark_base::stolen);
  run_stolen(first);
  for (unsigned i = 0; i < thief()->steal_batch_n; ++i) {
    EXPECT_EQ(thief()->steal_batch[i]->state.load(), spark_base::stolen);
    run_stolen(thief()->steal_batch[i]);
  }
  for (int i = 19; i >= 5; --i) EXPECT_EQ(s[static_cast<std::size_t>(i)]->get(), i);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s[static_cast<std::size_t>(i)]->get(), i);  // done elsewhere
  EXPECT_EQ(counter(p->fizzled), 15u);
}

// A big pool's answer stops at kStealBatch sparks, oldest first: the
// thief's backlog is bounded, and the owner keeps the rest.
TEST_F(StealProtocol, AnAnswerHoldsAtMostKStealBatchSparks) {
  Task owner;
  own_victim(&owner);
  constexpr unsigned kBatch = Capability::kStealBatch;
  const int n = static_cast<int>(8 * kBatch);  // a quarter of the rest is more than a batch
  std::vector<std::unique_ptr<spark<int>>> s;
  for (int i = 0; i < n; ++i) s.emplace_back(new spark<int>(capstan::par([i] { return i; })));
  spark_pool* p = &victim()->sparks;
  p->request.store(thief());
  capstan::rts::poll_spark_requests(victim());
  spark_base* first = thief()->steal_box.load();
  ASSERT_EQ(addr(first), addr(s[0].get()));
  ASSERT_EQ(thief()->steal_batch_n, kBatch - 1);
  for (unsigned i = 0; i < thief()->steal_batch_n; ++i)
    EXPECT_EQ(addr(thief()->steal_batch[i]), addr(s[i + 1].get()));
  EXPECT_EQ(p->size(), static_cast<std::size_t>(n) - kBatch);
  run_stolen(first);
  for (unsigned i = 0; i < thief()->steal_batch_n; ++i) run_stolen(thief()->steal_batch[i]);
  for (int i = n - 1; i >= 0; --i) EXPECT_EQ(s[static_cast<std::size_t>(i)]->get(), i);
  EXPECT_EQ(counter(p->fizzled), static_cast<std::uint64_t>(n) - kBatch);
}

// A run that ends with stolen sparks still in a capability's backlog (their
// makers abandoned, no spark thread left to run them) counts them GC'd when
// the pool is released: SPARKS adds up after any shutdown.
TEST_F(StealProtocol, ReleasingAPoolCountsItsUnrunBacklogGcd) {
  Task owner;
  own_victim(&owner);
  std::vector<std::unique_ptr<spark<int>>> s;
  for (int i = 0; i < 9; ++i) s.emplace_back(new spark<int>(capstan::par([i] { return i; })));
  victim()->sparks.request.store(thief());
  capstan::rts::poll_spark_requests(victim());
  spark_base* first = thief()->steal_box.load();
  ASSERT_EQ(thief()->steal_batch_n, 2u);
  std::vector<spark_base*> backlog(thief()->steal_batch, thief()->steal_batch + 2);
  for (spark_base* b : backlog) thief()->stolen_sparks[thief()->n_stolen_sparks++] = b;
  thief()->steal_batch_n = 0;
  std::uint64_t gcd0 = counter(thief()->sparks.gcd);
  capstan::rts::spark_pool_release(thief());
  EXPECT_EQ(counter(thief()->sparks.gcd), gcd0 + 2) << "the unrun backlog was not counted";
  EXPECT_EQ(thief()->n_stolen_sparks, 0u);
  capstan::rts::spark_pool_init(thief(), 1024);  // for TearDown
  // Settle them, as no real run would, so that their ~spark does not wait.
  run_stolen(first);
  for (spark_base* b : backlog) run_stolen(b);
}

TEST_F(StealProtocol, AnEmptyPoolAnswersNoneAndAWithdrawnRequestIsNotAnswered) {
  Task owner;
  own_victim(&owner);
  spark_pool* p = &victim()->sparks;
  capstan::rts::poll_spark_requests(victim());  // nothing asked
  EXPECT_EQ(thief()->steal_box.load(), nullptr);
  p->request.store(thief());
  capstan::rts::poll_spark_requests(victim());
  // "none" is an answer, distinct from "not answered yet" (null).
  EXPECT_NE(thief()->steal_box.load(), nullptr);
  EXPECT_EQ(thief()->steal_batch_n, 0u);
  EXPECT_EQ(p->request.load(), nullptr);
}

TEST_F(StealProtocol, ParAnswersAPendingRequestWithTheSparkItPushes) {
  Task owner;
  own_victim(&owner);
  victim()->sparks.request.store(thief());
  auto s = capstan::par([] { return 42; });  // par() is a poll point
  ASSERT_EQ(addr(thief()->steal_box.load()), addr(&s));
  EXPECT_EQ(victim()->sparks.size(), 0u);
  run_stolen(thief()->steal_box.load());
  EXPECT_EQ(s.get(), 42);
}

// Note [Asking before the sparks exist]: only a hunt (early) asks a pool
// that is empty, and only that of a busy capability that has made sparks;
// the request is withdrawn when no spark comes within the wait, so nothing
// is left behind.
TEST_F(StealProtocol, OnlyAHuntAsksAnEmptyPoolAndOnlyABusyOne) {
  Task owner;
  own_victim(&owner);
  spark_pool* p = &victim()->sparks;
  std::uint64_t a0 = thief()->steal_attempts.get();
  bool asked = false;
  EXPECT_EQ(capstan::rts::find_spark(thief(), &asked), nullptr);
  EXPECT_FALSE(asked) << "a capability that never made a spark was asked";
  {
    auto made = capstan::par([] { return 1; });  // now it has made one
    EXPECT_EQ(made.get(), 1);
  }
  // ask() clears the thief's answer box first: a marker left in it shows
  // that no request was posted.
  auto* marker = reinterpret_cast<spark_base*>(std::uintptr_t{8});
  thief()->steal_box.store(marker);
  EXPECT_EQ(capstan::rts::find_spark(thief()), nullptr);  // a spark thread's look
  EXPECT_EQ(thief()->steal_box.load(), marker) << "a spark thread's look asked an empty pool";
  thief()->steal_box.store(nullptr);
  victim()->idle.store(true);
  EXPECT_EQ(capstan::rts::find_spark(thief(), &asked), nullptr);
  EXPECT_FALSE(asked) << "an idle capability with nothing in its inbox was asked";
  victim()->idle.store(false);
  EXPECT_EQ(capstan::rts::find_spark(thief(), &asked), nullptr);  // withdrawn, unanswered
  EXPECT_TRUE(asked) << "a hunt did not ask the busy capability";
  EXPECT_EQ(thief()->steal_attempts.get(), a0)
      << "an unanswered early request was counted as a steal attempt";
  EXPECT_EQ(p->request.load(), nullptr) << "a withdrawn request was left behind";
  EXPECT_EQ(p->size(), 0u);
}

// An early request stays pending through the owner's poll points while
// its pool is empty (an ordinary one is answered "none" there), and the
// next par() answers it with the spark it pushes.
TEST_F(StealProtocol, AnEarlyRequestWaitsThroughPollPointsForASpark) {
  Task owner;
  own_victim(&owner);
  spark_pool* p = &victim()->sparks;
  Capability* req = capstan::rts::early_request(thief());
  p->request.store(req);
  for (int i = 0; i < 3; ++i) capstan::rts::poll_spark_requests(victim());
  EXPECT_EQ(p->request.load(), req) << "an early request was answered on an empty pool";
  EXPECT_EQ(thief()->steal_box.load(), nullptr);
  auto s = capstan::par([] { return 42; });
  EXPECT_EQ(p->request.load(), nullptr);
  ASSERT_EQ(addr(thief()->steal_box.load()), addr(&s));
  EXPECT_EQ(p->size(), 0u);
  run_stolen(thief()->steal_box.load());
  EXPECT_EQ(s.get(), 42);
}

// The point of asking early: the owner's next par() answers with the spark
// it has just made, before the owner can run it itself.  The request must
// be seen pending on the still-empty pool (a thief that asked only pools
// holding sparks never posts one there).
TEST_F(StealProtocol, AnEarlyRequestIsAnsweredByTheNextPar) {
  Task owner;
  own_victim(&owner);
  spark_pool* p = &victim()->sparks;
  {
    auto made = capstan::par([] { return 1; });  // a maker of sparks
    EXPECT_EQ(made.get(), 1);
  }
  std::atomic<spark_base*> got{nullptr};
  std::atomic<bool> stop{false};
  std::thread thief_thread([&] {
    while (!stop.load()) {
      bool asked = false;
      if (spark_base* s = capstan::rts::find_spark(thief(), &asked)) {
        got.store(s);
        return;
      }
    }
  });
  auto give_up = std::chrono::steady_clock::now() + capstan_test::kWaitGuard;  // failure guard
  bool seen = false;
  std::unique_ptr<spark<int>> s;
  while (!s && std::chrono::steady_clock::now() < give_up) {
    // The thief withdraws after kEarlyAskNs: push only while it is asking.
    if (p->request.load() == capstan::rts::early_request(thief())) {
      seen = true;
      s.reset(new spark<int>(capstan::par([] { return 42; })));
    }
  }
  // If the request was withdrawn just before the push, the thief's next
  // (ordinary) ask is answered here.
  while (s && !got.load() && std::chrono::steady_clock::now() < give_up)
    capstan::rts::poll_spark_requests(victim());
  stop.store(true);
  thief_thread.join();
  ASSERT_TRUE(seen) << "no request was posted on the empty pool of a busy capability";
  ASSERT_EQ(addr(got.load()), addr(s.get()));
  run_stolen(got.load());
  EXPECT_EQ(s->get(), 42);
  EXPECT_EQ(p->request.load(), nullptr);
}

// The owner pushes, pops its newest and polls, in random order; a thief
// asks through find_spark at the same time.  Every spark runs exactly once,
// either popped by its owner (fizzled) or answered to the thief; none is
// lost in a withdrawn or crossed request.
TEST_F(StealProtocol, EverySparkGoesToExactlyOneParty) {
  const int n = 20000 / kScale;
  std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
  std::vector<std::unique_ptr<spark<int>>> sparks(static_cast<std::size_t>(n));
  std::atomic<bool> owner_done{false};
  std::atomic<int> by_thief{0}, wrong{0};
  int by_owner = 0;
  std::thread owner_thread([&] {
    Task owner;
    own_victim(&owner);
    spark_pool* p = &victim()->sparks;
    std::unordered_map<const void*, int> which;
    Rng rng(31);
    int pushed = 0;
    auto give_up = std::chrono::steady_clock::now() + capstan_test::kWaitGuard;  // failure guard
    while (pushed < n || p->size() != 0) {
      unsigned what = rng.below(4);
      // (At most half the pool: an overflowed spark goes to nobody.)
      if (pushed < n && p->size() < 512 && (what < 2 || p->size() == 0)) {
        auto* r = &runs[static_cast<std::size_t>(pushed)];
        int k = pushed;
        sparks[static_cast<std::size_t>(k)].reset(new spark<int>(capstan::par([r, k] {
          r->fetch_add(1, std::memory_order_relaxed);
          return k;
        })));
        which[addr(sparks[static_cast<std::size_t>(k)].get())] = k;
        ++pushed;
      } else if (what == 2 && p->size() != 0 && 
                 (pushed < n || by_thief.load() > 0 || std::chrono::steady_clock::now() > give_up)) {
        // (Once all are pushed, the last ones wait for the thief's first
        // answer, so the thief's side is exercised however threads run.)
        // The top slot is ours and pending: nobody else takes from the pool.
        int k = which.at(slot(p, p->top.load() - 1));
        if (sparks[static_cast<std::size_t>(k)]->get() != k) wrong.fetch_add(1);
        ++by_owner;
      } else {
        capstan::rts::poll_spark_requests(victim());
        spin(rng.below(100));
      }
    }
    owner_done.store(true);
    // Stay the owner (answering) until the thief has given up asking.
    while (owner_done.load()) capstan::rts::poll_spark_requests(victim());
  });
  std::thread thief_thread([&] {
    Rng rng(32);
    Capability* me = thief();
    for (;;) {
      bool done = owner_done.load();  // read before looking: then nothing is left
      // Half the looks are a hunt's, which also asks the empty pool (Note
      // [Asking before the sparks exist]).
      bool asked = false;
      if (spark_base* s = capstan::rts::find_spark(me, rng.below(2) == 0 ? &asked : nullptr)) {
        run_stolen(s);
        by_thief.fetch_add(1);
        continue;
      }
      if (done && me->n_stolen_sparks == 0) break;
      spin(rng.below(100));
    }
    owner_done.store(false);  // lets the owner go
  });
  owner_thread.join();
  thief_thread.join();
  int twice = 0, never = 0;
  for (auto& r : runs) {
    if (r.load() > 1) ++twice;
    if (r.load() == 0) ++never;
  }
  // A lost spark would wait for its thief in its destructor: settle it.
  for (auto& sp : sparks) {
    auto* b = reinterpret_cast<spark_base*>(sp.get());
    if (b && b->state.load() != spark_base::done) b->state.store(spark_base::done);
  }
  EXPECT_EQ(twice, 0) << "a spark ran twice";
  EXPECT_EQ(never, 0) << "a spark was lost";
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(by_owner + by_thief.load(), n);
  EXPECT_EQ(counter(victim()->sparks.created), static_cast<std::uint64_t>(n));
  EXPECT_EQ(counter(victim()->sparks.fizzled), static_cast<std::uint64_t>(by_owner));
  EXPECT_EQ(victim()->sparks.size(), 0u);
  EXPECT_GE(by_thief.load(), 1) << "the thief never got an answer";
  EXPECT_EQ(victim()->sparks.request.load(), nullptr) << "a request was left behind";
}

}  // namespace
