// stack_exhaustion_test.cpp - Note [Running out of stacks] (storage/stack.cpp):
// when no memory can be mapped for a new thread's stack, that thread ends
// before it runs - counted, reported once, its async told - the threads
// that must run (bound ones) run on a reserve stack, and once memory can be
// mapped again new threads run as before.  The fail_stack_maps knob stands
// in for the kernel refusing the mapping.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "capstan_test.hpp"
#include "primitives/clock.hpp"
#include "primitives/fault_injection.hpp"
#include "storage/stack.hpp"

namespace {

using namespace capstan;
namespace fi = capstan::rts::fault_injection;

// Clears the knob however the test ends.
struct FailingMaps {
  FailingMaps() { fi::fail_stack_maps.store(true); }
  ~FailingMaps() { fi::fail_stack_maps.store(false); }
  void stop() { fi::fail_stack_maps.store(false); }
};

TEST(StackArena, AFailedMappingGivesNoStackAndTheReserveIsHeldApart) {
  rts::StackArena arena;
  arena.configure(64 * 1024);
  arena.prime(1);
  const std::size_t reserve = rts::StackArena::reserve_for(1);
  std::vector<void*> got;
  {
    FailingMaps failing;
    // The first slab, less the reserve, then nothing.
    while (void* s = arena.allocate()) got.push_back(s);
    EXPECT_EQ(got.size(), rts::StackArena::kSlabStacks - reserve);
    EXPECT_GE(arena.map_failures(), 1u);
    std::vector<void*> batch;
    arena.allocate_batch(batch, 16);
    EXPECT_TRUE(batch.empty()) << "a batch came out of nothing";
    EXPECT_TRUE(arena.exhausted(rts::now_ns()));
    EXPECT_FALSE(arena.exhausted(rts::now_ns() + rts::StackArena::kExhaustedNs))
        << "exhaustion never expires";
    // A stack coming back ends the exhaustion: the next allocation is it.
    void* back = got.back();
    got.pop_back();
    arena.give_back(&back, 1);
    EXPECT_FALSE(arena.exhausted(rts::now_ns()));
    EXPECT_EQ(arena.allocate(), back);
    got.push_back(back);
    EXPECT_EQ(arena.allocate(), nullptr);
    EXPECT_TRUE(arena.exhausted(rts::now_ns()));
    // The reserve is still there, and only it.
    std::vector<void*> taken;
    while (void* r = arena.take_reserve()) taken.push_back(r);
    EXPECT_EQ(taken.size(), reserve);
    for (void* r : taken) arena.return_reserve(r);
  }
  // Memory again: a new slab.
  void* s = arena.allocate();
  EXPECT_NE(s, nullptr);
  EXPECT_FALSE(arena.exhausted(rts::now_ns()));
  EXPECT_EQ(arena.mappings(), 2u);
  arena.release_all();
}

// Two capabilities' pools on one arena: while the arena is out of memory,
// a stack returned to one pool, or an idle pass of it, sends everything
// that pool holds to the arena, where the other pool's next get() finds it.
TEST(StackPool, WhileTheArenaIsExhaustedPoolsShareTheirStacks) {
  rts::StackArena arena;
  arena.configure(64 * 1024);
  arena.prime(2);
  rts::StackPool a, b;
  a.attach(&arena, /*watermark=*/64);
  b.attach(&arena, /*watermark=*/64);
  std::vector<void*> held;
  {
    FailingMaps failing;
    // b takes the first slab's stacks, then keeps 40 of them pooled.
    while (void* s = b.get()) held.push_back(s);
    ASSERT_GE(held.size(), 41u);
    EXPECT_TRUE(arena.maybe_exhausted());
    for (int i = 0; i < 40; ++i) {
      // The first put shares (the arena is exhausted), which clears the
      // hint; later ones are pooled as usual.
      b.put(held.back());
      held.pop_back();
    }
    EXPECT_EQ(b.pooled(), 39u) << "only the first returned stack should have been shared";
    EXPECT_NE(a.get(), nullptr) << "the shared stack did not reach the other pool";
    // a's next get() fails again: exhausted once more, while b pools 39.
    EXPECT_EQ(a.get(), nullptr);
    EXPECT_TRUE(arena.maybe_exhausted());
    // b falls idle: all 39 go to the arena (above the watermark or not).
    b.trim_idle();
    EXPECT_EQ(b.pooled(), 0u);
    std::size_t got = 0;
    while (void* s = a.get()) {
      held.push_back(s);
      ++got;
    }
    EXPECT_EQ(got, 39u) << "a should have found every stack b held";
    // Nothing pooled: an idle pass must not clear the hint by parking nothing.
    EXPECT_TRUE(arena.maybe_exhausted());
    b.trim_idle();
    EXPECT_TRUE(arena.maybe_exhausted());
  }
  for (void* s : held) a.put(s);
  arena.release_all();
}

TEST(StackArena, RunFailsCleanlyWhenNotEvenTheFirstStacksCanBeMapped) {
  FailingMaps failing;
  try {
    run(capstan_test::opts(1), [] { ADD_FAILURE() << "main ran without a stack"; });
    ADD_FAILURE() << "run() did not fail";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::not_enough_memory);
    EXPECT_NE(std::string(e.what()).find("green-thread stacks"), std::string::npos) << e.what();
  }
  failing.stop();
  EXPECT_EQ(run(capstan_test::opts(1), [] { return 7; }), 7) << "the next run() is spoilt";
}

class StackExhaustion : public capstan_test::WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(StackExhaustion);

// Threads forked while no stack can be had either run (stacks still
// pooled or in the mapped slab) or end unstarted: none is lost, none runs
// its body twice, the unstarted are counted and died, and once the
// mapping succeeds again every new thread runs.
TEST_P(StackExhaustion, ThreadsWithoutAStackEndUnstartedAndLaterOnesRun) {
  constexpr int kDuring = 600;  // more than a slab (256): some cannot start
  constexpr int kAfter = 300;
  std::atomic<int> ran{0};
  int unstarted = 0, blocked = 0;
  bool async_threw = false, async_ran = false;
  int bound_got = 0;
  long sparks_sum = 0, sparks_want = 0;
  std::uint64_t unstarted_before_sparks = 0, unstarted_after_sparks = 0;
  testing::internal::CaptureStderr();
  // Ends the capture however the run ends, so later tests' output shows.
  struct Captured {
    std::string text;
    bool done = false;
    std::string take() { return done ? text : (done = true, text = testing::internal::GetCapturedStderr()); }
    ~Captured() { take(); }
  } captured;
  run([&] {
    mvar<int> gate;
    std::vector<thread_id> during;
    {
      FailingMaps failing;
      for (int i = 0; i < kDuring; ++i)
        during.push_back(fork_io([&] {
          ran.fetch_add(1);
          gate.read();  // holds its stack until the end
        }));
      for (thread_id id : during) {
        thread_state st;
        while ((st = state_of(id)) != thread_state::blocked && st != thread_state::died) yield();
        (st == thread_state::died ? unstarted : blocked)++;
      }
      // An async whose thread cannot start reports, rather than hanging
      // its waiter.
      capstan::async a([] { return 1; });
      try {
        async_ran = a.wait() == 1;  // it found a stack pooled on its capability
      } catch (const thread_killed&) {
        async_threw = true;
      }
      // A bound thread must run: it gets a reserve stack.
      mvar<int> from_bound;
      fork_os([&] { from_bound.put(42); });
      bound_got = from_bound.take();
      // Sparks taken by an idle capability whose spark thread finds no
      // stack go back to their maker, whose get() runs them: right
      // values, none lost, none run twice.  Whether a thief's pool is
      // empty here is up to timing (and with one CPU nobody steals), so
      // this only checks what comes out; the give-back itself is tested
      // deterministically in tests/rts/sparks/spark_pool_test.cpp.
      unstarted_before_sparks = statistics().threads_unstarted;
      for (int round = 0; round < 20; ++round) {
        std::vector<std::unique_ptr<spark<long>>> ss;
        for (long i = 0; i < 64; ++i) {
          ss.emplace_back(new spark<long>(par([i] { return i * i; })));
          sparks_want += i * i;
        }
        for (int y = 0; y < 4; ++y) yield();  // poll points: thieves are answered
        for (auto& sp : ss) sparks_sum += sp->get();
      }
      unstarted_after_sparks = statistics().threads_unstarted;
    }
    std::vector<thread_id> after;
    for (int i = 0; i < kAfter; ++i)
      after.push_back(fork_io([&] {
        ran.fetch_add(1);
        gate.read();
      }));
    for (thread_id id : after)
      while (state_of(id) != thread_state::blocked) {
        ASSERT_NE(state_of(id), thread_state::died) << "a thread failed to start after recovery";
        yield();
      }
    gate.put(1);  // everyone goes home
  });
  std::string err = captured.take();
  EXPECT_EQ(unstarted + blocked, kDuring);
  EXPECT_GT(unstarted, 0) << "every thread found a stack: the test did not exhaust them";
  EXPECT_GT(blocked, 0);
  EXPECT_EQ(ran.load(), blocked + kAfter) << "an unstarted thread ran, or a started one twice";
  auto s = statistics();
  EXPECT_NE(async_threw, async_ran) << "the async neither reported nor ran";
  // At -N1 there is one pool, emptied by the blocked threads.
  if (caps() == 1) {
    EXPECT_TRUE(async_threw) << "the async of an unstarted thread did not report";
  }
  EXPECT_EQ(bound_got, 42);
  EXPECT_EQ(sparks_sum, sparks_want) << "a given-back spark was lost or run twice";
  EXPECT_GE(unstarted_after_sparks, unstarted_before_sparks);
  if (caps() == 1) {
    EXPECT_EQ(unstarted_after_sparks, unstarted_before_sparks) << "no spark threads at -N1";
  }
  EXPECT_EQ(s.sparks.created, s.sparks.converted + s.sparks.fizzled + s.sparks.gcd)
      << "SPARKS categories do not add up";
  EXPECT_GE(s.threads_unstarted, static_cast<std::uint64_t>(unstarted) + (async_threw ? 1 : 0));
  EXPECT_GE(s.threads_died, s.threads_unstarted);
  EXPECT_NE(s.summary().find("ended unstarted, no memory for their stacks: " +
                             std::to_string(s.threads_unstarted)),
            std::string::npos)
      << s.summary();
  // One line for the run, not one per thread.
  std::size_t first = err.find("cannot map");
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("cannot map", first + 1), std::string::npos) << err;
}

}  // namespace
