// spark_test.cpp - par/get semantics, GHC's spark accounting, overflow,
// exceptions, waiting for a spark another capability runs (and being
// interrupted while waiting), and shutdown.
#include <atomic>
#include <memory>
#include <optional>
#include <chrono>
#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::WithCaps;

class Sparks : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Sparks);
class SparkPool : public capstan_test::RuntimeTest {};
class SparkSteal : public capstan_test::RuntimeTest {};
class SparkShutdown : public capstan_test::RuntimeTest {};

long sfib(int n) { return n < 2 ? n : sfib(n - 1) + sfib(n - 2); }
long pfib(int n, std::atomic<long>* runs) {
  if (n < 10) return sfib(n);
  auto a = capstan::par([=] {
    runs->fetch_add(1, std::memory_order_relaxed);
    return pfib(n - 1, runs);
  });
  long b = pfib(n - 2, runs);
  return a.get() + b;
}

TEST_P(Sparks, ParfibIsRightAndEverySparkRunsExactlyOnce) {
  std::atomic<long> runs{0};
  long r = run([&] { return pfib(25, &runs); });
  EXPECT_EQ(r, sfib(25));
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(static_cast<std::uint64_t>(runs.load()), s.created + s.overflowed) << "a spark ran twice or never";
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd) << "SPARKS categories do not add up";
  EXPECT_EQ(s.gcd, 0u);
  EXPECT_EQ(s.dud, 0u);
  if (caps() == 1) {
    EXPECT_EQ(s.converted, 0u) << "nobody idle, yet sparks converted";
  }
}

// The first get() moves the value out; a second one is a misuse and says
// so instead of returning a moved-from value.  An exception is rethrown by
// every get(), and a void or reference spark may be got again.  At -N2 the
// spark may be stolen and run by a spark thread first: the rule is the same.
TEST_P(Sparks, ASecondGetOfAValueIsAUsageErrorNotAMovedFromValue) {
  std::string first, said;
  int again_thrown = 0;
  bool void_twice = false, ref_twice = false;
  run([&] {
    auto s = capstan::par([] { return std::string(40, 'x') + std::to_string(sfib(20)); });
    first = s.get();
    try {
      (void)s.get();
      said = "(returned)";
    } catch (const capstan::usage_error& e) {
      said = e.what();
    }
    auto e = capstan::par([]() -> int { throw std::runtime_error("spark failed"); });
    for (int i = 0; i < 2; ++i) {
      try {
        (void)e.get();
      } catch (const std::runtime_error&) {
        ++again_thrown;
      }
    }
    int calls = 0;
    auto v = capstan::par([&calls] { ++calls; });
    v.get();
    v.get();
    void_twice = calls == 1;
    // Nothing moves out of a reference spark: it returns the same referent.
    int target = 7;
    auto r = capstan::par([&target]() -> int& { return target; });
    int* first_ref = &r.get();
    ref_twice = first_ref == &target && &r.get() == &target;
  });
  EXPECT_EQ(first, std::string(40, 'x') + std::to_string(sfib(20)));
  EXPECT_NE(said.find("capstan::spark::get"), std::string::npos) << said;
  EXPECT_NE(said.find("already taken"), std::string::npos) << said;
  EXPECT_EQ(again_thrown, 2) << "an exception is rethrown by every get()";
  EXPECT_TRUE(void_twice) << "a void spark's second get() must return without running it again";
  EXPECT_TRUE(ref_twice) << "a reference spark's second get() must return the same referent";
}

// get() is a safe point (Note [A spark's safe point]): a thread whose work
// is only sparks and their gets is preempted, timed out and killed like any
// other.  Each loop gives up after 3 s, so a get() that is no safe point
// fails the test instead of hanging it.
long spark_loop(std::chrono::steady_clock::time_point give_up) {
  long sum = 0;
  while (std::chrono::steady_clock::now() < give_up) {
    auto a = capstan::par([] { return sfib(12); });
    sum += sfib(12) + a.get();
  }
  return sum;
}

TEST_P(Sparks, AGetIsASafePointForTimeoutsAndKills) {
  using namespace std::chrono;
  std::optional<long> timed;
  bool others_ran = false;
  capstan::thread_state killed_state = capstan::thread_state::running;
  steady_clock::duration timeout_took{}, kill_took{};
  // Outside run(): the sleeper may wake and count once more after main
  // has returned and before shutdown kills it.  Declared inside main's
  // lambda, that increment landed in main's reused stack - on a return
  // address of shutdown_protocol, one byte on (a crash under load).
  std::atomic<long> ticks{0};
  std::atomic<bool> stop{false};
  run([&] {
    capstan::fork_io([&] {
      while (!stop.load()) {
        capstan::sleep_for(milliseconds(1));
        ticks.fetch_add(1);
      }
    });
    auto t0 = steady_clock::now();
    // The sleeper needs two timeslice expiries of the loop (one to start
    // its sleep, one to count): 300 ms leaves room for a ticker that a
    // loaded machine runs late.
    timed = capstan::timeout(milliseconds(300), [&] { return spark_loop(t0 + seconds(3)); });
    timeout_took = steady_clock::now() - t0;
    others_ran = ticks.load() > 0;
    auto victim = capstan::fork_io([&] { spark_loop(steady_clock::now() + seconds(3)); });
    capstan::sleep_for(milliseconds(5));
    auto t1 = steady_clock::now();
    capstan::kill_thread(victim);
    for (auto st = capstan::state_of(victim);
         st != capstan::thread_state::died && st != capstan::thread_state::finished;
         st = capstan::state_of(victim))
      capstan::yield();
    kill_took = steady_clock::now() - t1;
    killed_state = capstan::state_of(victim);
    stop.store(true);
  });
  EXPECT_FALSE(timed.has_value()) << "the timeout never interrupted the spark loop";
  EXPECT_LT(timeout_took, seconds(2));
  EXPECT_TRUE(others_ran) << "a sleeping thread got no turn during the spark loop";
  EXPECT_EQ(killed_state, capstan::thread_state::died);
  EXPECT_LT(kill_took, seconds(2));
}

// A spark that keeps its thief busy until its maker has forced a later
// spark: the thief's answer took the later ones too, into its backlog
// (marked stolen, so get() waits for the thief), and they ran only after
// the busy spark - which waited for them: a hang at every -N >= 2 (Note
// [A wanted spark does not wait behind its thief], rts/sparks/pool.cpp).
// `busy` says how s1 keeps its thread: yielding in a loop, or inside a
// safe call, where the capability is released and its backlog must reach
// a spare Task (free_with_work, runtime/ticker.cpp).  Each wait is cut
// after 3 s so that a failure does not hang.
void later_spark_forced_while_the_first_waits(const capstan::options& o, bool in_safe_call) {
  std::atomic<bool> got_s2{false}, s1_started{false};
  auto t0 = std::chrono::steady_clock::now();
  auto cut = t0 + std::chrono::seconds(3);
  int sum = capstan::run(o, [&] {
    auto s1 = capstan::par([&] {
      s1_started = true;
      if (in_safe_call) {
        capstan::safe_call([&] {
          while (!got_s2.load() && std::chrono::steady_clock::now() < cut)
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        });
      } else {
        while (!got_s2.load() && std::chrono::steady_clock::now() < cut) capstan::yield();
      }
      return 1;
    });
    auto s2 = capstan::par([] { return 2; });
    auto s3 = capstan::par([] { return 3; });
    auto s4 = capstan::par([] { return 4; });
    auto s5 = capstan::par([] { return 5; });
    // Let a thief take s1 (none can at -N1).
    while (o.capabilities > 1 && !s1_started.load() &&
           std::chrono::steady_clock::now() < t0 + std::chrono::milliseconds(200))
      capstan::yield();
    int a = s5.get() + s4.get() + s3.get() + s2.get();
    got_s2 = true;
    return a + s1.get();
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(sum, 15);
  EXPECT_LT(ms, 1500) << "the later sparks waited behind the first (cut after 3 s)";
}

TEST_P(Sparks, ALaterSparkIsNotHeldBehindAYieldingOneItsMakerWaitsFor) {
  for (int i = 0; i < 5; ++i) later_spark_forced_while_the_first_waits(capstan_test::opts(caps()), false);
}

TEST_P(Sparks, ALaterSparkIsNotHeldBehindOneInASafeCallItsMakerWaitsFor) {
  for (int i = 0; i < 5; ++i) later_spark_forced_while_the_first_waits(capstan_test::opts(caps()), true);
}

TEST_P(Sparks, VoidSparksAndOutOfOrderGets) {
  std::vector<int> done(5, 0);
  run([&] {
    auto a = capstan::par([&] { done[0] = 1; });
    auto b = capstan::par([&] { done[1] = 1; });
    auto c = capstan::par([&] { return done[2] = 1; });
    a.get();  // not on top of the pool: removed from the middle
    EXPECT_EQ(c.get(), 1);
    b.get();
  });
  EXPECT_EQ(done[0] + done[1] + done[2], 3);
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd);
}

TEST_P(Sparks, ExceptionsAreRethrownByGet) {
  run([&] {
    for (int i = 0; i < 200; ++i) {
      auto s = capstan::par([i]() -> int { throw std::runtime_error("spark " + std::to_string(i)); });
      try {
        s.get();
        ADD_FAILURE() << "no exception";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "spark " + std::to_string(i));
      }
    }
  });
}

// Out of line: the compiler may not fold the check from the type's alignment.
[[gnu::noinline]] bool aligned_to_64(const void* p) {
  asm volatile("" : "+r"(p));
  return reinterpret_cast<std::uintptr_t>(p) % 64 == 0;
}

// Tracked counts the live copies of itself; `pad` makes a closure that
// holds one too big for the spark's inline buffer when it is wide.
template <std::size_t Pad>
struct Tracked {
  static inline std::atomic<long> live{0};
  long pad[Pad] = {};
  Tracked() { live.fetch_add(1); }
  Tracked(const Tracked& o) : Tracked() { std::copy(std::begin(o.pad), std::end(o.pad), pad); }
  ~Tracked() { live.fetch_sub(1); }
};

// A spark stores its closure inline or on the heap and its result in a
// union (Note [A spark's fast path] in capstan/spark.hpp): every shape is
// built once, run at most once and destroyed once, run here, elsewhere or
// not at all.
TEST_P(Sparks, ClosuresAndResultsOfEveryShapeAreBuiltAndDestroyedOnce) {
  using Small = Tracked<1>;
  using Big = Tracked<16>;  // 128 bytes of padding: on the heap
  std::atomic<int> ran{0}, unforced_ran{0};
  int target = 0;
  run([&] {
    for (int round = 0; round < 200; ++round) {
      Small small;
      Big big;
      big.pad[15] = round;
      auto a = capstan::par([&ran, small, big] {
        ran.fetch_add(1);
        return std::string(40, 'x') + std::to_string(big.pad[15]);  // not an SSO string
      });
      auto b = capstan::par([&ran, small] {
        ran.fetch_add(1);
        return std::make_unique<int>(7);  // move-only result
      });
      auto c = capstan::par([&]() -> int& {
        ran.fetch_add(1);
        return target;
      });
      auto d = capstan::par([&ran, big]() { ran.fetch_add(1); });  // void, heap closure
      auto e = capstan::par([]() -> const std::string { return "const"; });  // a const result
      // An over-aligned closure, on the heap at its own alignment.
      struct alignas(64) Wide {
        long v[2];
      } wide{{5, 0}};
      auto f = capstan::par([wide] {
        EXPECT_TRUE(aligned_to_64(&wide)) << "an over-aligned closure is misaligned";
        return wide.v[0];
      });
      {
        // A heap closure, discarded unforced: never run, unless a thief
        // took it first (then ~spark waits for it).
        auto unforced = capstan::par([&unforced_ran, big] {
          unforced_ran.fetch_add(1);
          return 0;
        });
      }
      capstan::yield();  // an idle capability may take some of them
      d.get();
      EXPECT_EQ(f.get(), 5);
      EXPECT_EQ(e.get(), "const");
      EXPECT_EQ(&c.get(), &target);
      EXPECT_EQ(*b.get(), 7);
      EXPECT_EQ(a.get(), std::string(40, 'x') + std::to_string(round));
    }
  });
  EXPECT_EQ(ran.load(), 4 * 200) << "a spark ran twice or never";
  EXPECT_EQ(Small::live.load(), 0) << "a small closure was destroyed twice or never";
  EXPECT_EQ(Big::live.load(), 0) << "a heap closure was destroyed twice or never";
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd);
  EXPECT_EQ(s.gcd + static_cast<std::uint64_t>(unforced_ran.load()), 200u)
      << "an unforced spark was neither GC'd nor run by a thief";
  if (caps() == 1) {
    EXPECT_EQ(unforced_ran.load(), 0) << "a discarded spark ran";
  }
}

TEST_P(Sparks, DestroyingAnUnforcedSparkNeverRunsIt) {
  std::atomic<int> ran{0};
  run([&] {
    for (int i = 0; i < 100; ++i) {
      auto s = capstan::par([&] { ran.fetch_add(1); });
      // dropped unforced: either discarded (GC'd) or, if an idle capability
      // already took it, waited for before the frame goes
    }
  });
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, 100u);
  EXPECT_EQ(static_cast<std::uint64_t>(ran.load()), s.converted) << "a discarded spark ran";
  EXPECT_EQ(s.gcd + s.converted, 100u);
  if (caps() == 1) {
    EXPECT_EQ(s.gcd, 100u);
  }
}

TEST_F(SparkPool, AFullPoolOverflowsAndGetRunsTheSparkInline) {
  capstan::options o = capstan_test::opts(1);
  o.spark_pool_size = 4;
  int sum = 0;
  run(o, [&] {
    auto s0 = capstan::par([] { return 1; });
    auto s1 = capstan::par([] { return 2; });
    auto s2 = capstan::par([] { return 3; });
    auto s3 = capstan::par([] { return 4; });
    auto s4 = capstan::par([] { return 5; });  // pool full
    auto s5 = capstan::par([] { return 6; });  // pool full
    sum = s5.get() + s4.get() + s3.get() + s2.get() + s1.get() + s0.get();
  });
  EXPECT_EQ(sum, 21);
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, 4u);
  EXPECT_EQ(s.overflowed, 2u);
  EXPECT_EQ(s.fizzled, 4u);
  EXPECT_EQ(s.total(), 6u);
}

// Forcing sparks oldest-first (a loop of get()s over a batch) must not
// leave holes that fill the pool: a small pool, many rounds, no overflow.
TEST_F(SparkPool, ForcingOldestFirstLeavesNoHoles) {
  capstan::options o = capstan_test::opts(1);
  o.spark_pool_size = 16;
  long sum = 0;
  run(o, [&] {
    for (int round = 0; round < 1000; ++round) {
      std::vector<std::unique_ptr<capstan::spark<int>>> batch;
      for (int i = 0; i < 8; ++i)
        batch.emplace_back(new capstan::spark<int>(capstan::par([i] { return i; })));
      for (auto& s : batch) sum += s->get();  // oldest first
    }
  });
  EXPECT_EQ(sum, 1000L * 28);
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.overflowed, 0u) << "holes left by out-of-order forcing filled the pool";
  EXPECT_EQ(s.created, 8000u);
  EXPECT_EQ(s.fizzled, 8000u);
}

// The maker blocks (parks, not spins) in get() while another capability
// runs its spark; other threads on the maker's capability keep running.
TEST_F(SparkSteal, GetWaitsForASparkRunningElsewhere) {
  std::atomic<bool> started{false};
  std::atomic<int> evaluations{0};
  int got = 0;
  bool helper_ran_while_blocked = false;
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> go;
    auto s = capstan::par([&] {
      evaluations.fetch_add(1);
      started = true;
      return go.take() + 1;  // blocks the spark thread on capability 1
    });
    while (!started.load()) capstan::yield();  // a poll point: answer the steal request
    EXPECT_NE(capstan::current_capability(), 1u);
    capstan::fork_on(0, [&] {
      helper_ran_while_blocked = true;  // runs only if main parked
      go.put(41);
    });
    got = s.get();
  });
  EXPECT_EQ(got, 42);
  EXPECT_EQ(evaluations.load(), 1);
  EXPECT_TRUE(helper_ran_while_blocked);
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.converted, 1u);
  EXPECT_EQ(s.created, 1u);
  EXPECT_GE(capstan::statistics().capabilities[1].steals, 1u);
}

// get() from a plain OS thread on a spark that another capability runs
// cannot wait: the usage_error names spark::get (it named an mvar
// operation, the wait under it), and the spark is left to its maker.
TEST_F(SparkSteal, AGetFromAPlainThreadOnAStolenSparkNamesItself) {
  std::atomic<bool> started{false};
  std::string said;
  int got = 0;
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> go;
    auto s = capstan::par([&] {
      started = true;
      return go.take() + 1;  // blocks the spark thread on capability 1
    });
    while (!started.load()) capstan::yield();
    std::thread os([&] {
      try {
        (void)s.get();
        said = "(returned)";
      } catch (const capstan::usage_error& e) {
        said = e.what();
      }
    });
    os.join();
    go.put(1);
    got = s.get();
  });
  EXPECT_NE(said.find("capstan::spark::get"), std::string::npos) << said;
  EXPECT_EQ(got, 2);
}

// Waits until `s`, a spark made by the calling thread, has been stolen by
// the idle capability 1 and is running there (`started`): yielding is a
// poll point at which the steal request is answered.
void until_started(const std::atomic<bool>& started) {
  while (!started.load()) capstan::yield();
}

// throw_to raises at once in a maker blocked in get() on a spark that
// another capability runs: kill_thread returns while the spark is still
// running.  The maker's stack then unwinds, and the spark's destructor
// waits for the spark (it writes into the maker's frame) without being
// interrupted; the frame goes only after the spark has finished.  Note
// [Completing a stolen spark].
TEST_F(SparkSteal, KillingAMakerBlockedOnAStolenSparkLandsAtOnce) {
  std::atomic<int> evaluations{0}, step{0};
  int kill_returned = 0, spark_finished = 0, frame_gone = 0;
  bool get_threw_killed = false;
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> go;
    std::atomic<bool> started{false};
    struct Last {
      std::atomic<int>* step;
      int* at;
      ~Last() { *at = ++*step; }
    };
    capstan::thread_id maker = capstan::fork_on(0, [&] {
      Last frame{&step, &frame_gone};  // destroyed after the spark (declared first)
      auto result = std::make_unique<int>(0);  // heap: ASan sees a write after free
      auto s = capstan::par([&, r = result.get()] {
        evaluations.fetch_add(1);
        started = true;
        *r = go.take() + 1;  // runs long: until main puts
        spark_finished = ++step;
        return *r;
      });
      until_started(started);
      try {
        s.get();
      } catch (const capstan::thread_killed&) {
        get_threw_killed = true;
        throw;
      }
      ADD_FAILURE() << "get() returned";
    });
    until_started(started);
    while (capstan::state_of(maker) != capstan::thread_state::blocked) capstan::yield();
    capstan::kill_thread(maker);  // returns once raised: the spark still runs
    kill_returned = ++step;
    EXPECT_EQ(spark_finished, 0) << "kill_thread waited for the spark";
    // The maker now waits, unwinding, in ~spark: not interruptible.
    while (capstan::state_of(maker) != capstan::thread_state::blocked) capstan::yield();
    EXPECT_EQ(frame_gone, 0) << "the maker's frame died under a running spark";
    go.put(41);
    while (capstan::state_of(maker) != capstan::thread_state::died) capstan::yield();
  });
  EXPECT_TRUE(get_threw_killed);
  EXPECT_EQ(evaluations.load(), 1);
  EXPECT_EQ(kill_returned, 1);
  EXPECT_EQ(spark_finished, 2);
  EXPECT_EQ(frame_gone, 3);
  auto st = capstan::statistics();
  EXPECT_EQ(st.sparks.created, 1u);
  EXPECT_EQ(st.sparks.converted, 1u);
  EXPECT_EQ(st.threads_killed, 1u);
  EXPECT_EQ(st.async_exceptions, 1u);
}

// A timeout interrupts get() on a stolen spark; the spark runs on, and a
// second get() waits for it and returns its result.
TEST_F(SparkSteal, AnInterruptedGetLeavesTheSparkToTheNextGet) {
  int got = 0;
  bool timed_out = false;
  std::atomic<int> evaluations{0};
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> go;
    std::atomic<bool> started{false};
    auto s = capstan::par([&] {
      evaluations.fetch_add(1);
      started = true;
      return go.take() + 1;
    });
    until_started(started);
    timed_out = !capstan::timeout(std::chrono::milliseconds(1), [&] { return s.get(); });
    capstan::fork_io([&] { go.put(41); });
    got = s.get();
  });
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(got, 42);
  EXPECT_EQ(evaluations.load(), 1);
  EXPECT_EQ(capstan::statistics().sparks.converted, 1u);
}

// Under uninterruptible_mask the wait is not interrupted: the kill lands
// once the spark has finished and the mask is gone.
TEST_F(SparkSteal, UninterruptibleMaskDefersTheKillPastTheSpark) {
  std::atomic<int> step{0};
  int got_at = 0, kill_returned = 0, got = 0;
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> go;
    std::atomic<bool> started{false};
    capstan::thread_id maker = capstan::fork_on(0, [&] {
      auto s = capstan::par([&] {
        started = true;
        return go.take() + 1;
      });
      until_started(started);
      capstan::uninterruptible_mask([&] {
        got = s.get();
        got_at = ++step;
      });
      capstan::yield();  // the kill lands here
      ADD_FAILURE() << "not killed";
    });
    until_started(started);
    while (capstan::state_of(maker) != capstan::thread_state::blocked) capstan::yield();
    std::atomic<bool> killing{false};
    capstan::fork_io([&] {
      // Put once the kill is (most likely) pending: it must not end the wait.
      while (!killing.load()) capstan::yield();
      for (int i = 0; i < 100; ++i) capstan::yield();
      go.put(41);
    });
    killing = true;
    capstan::kill_thread(maker);
    kill_returned = ++step;
  });
  EXPECT_EQ(got, 42);
  EXPECT_EQ(got_at, 1);
  EXPECT_EQ(kill_returned, 2);
}

// Note [Spark threads at shutdown]: a spark thread still looking for work
// when the program ends is the runtime's; it ends, and the statistics say
// the program killed nothing.  At -N1 the spark thread made while main
// waited in get() is queued behind main when main returns.
TEST_F(SparkShutdown, SparkThreadsEndWithoutBeingCountedAsKilled) {
  int v = 0;
  run(capstan_test::opts(1), [&] {
    auto s1 = capstan::par([] {
      capstan::sleep_for(std::chrono::milliseconds(5));
      return 1;
    });
    auto s2 = capstan::par([] {
      capstan::sleep_for(std::chrono::milliseconds(5));
      return 2;
    });
    v = s1.get() + s2.get();
  });
  EXPECT_EQ(v, 3);
  auto st = capstan::statistics();
  EXPECT_GE(st.sparks.converted, 1u) << "no spark thread was made: the test shows nothing";
  EXPECT_EQ(st.threads_killed, 0u) << st.summary();
  EXPECT_EQ(st.threads_died, 0u) << st.summary();
  EXPECT_EQ(st.threads_finished, st.threads_created);
}

TEST_F(SparkShutdown, SparksLeftInPoolsAreCountedGcdAndNeverRun) {
  std::atomic<int> ran{0};
  run(capstan_test::opts(1), [&] {
    capstan::fork_io([&] {
      auto a = capstan::par([&] { ran.fetch_add(1); });
      auto b = capstan::par([&] { ran.fetch_add(1); });
      capstan::mvar<int> never;
      never.take();  // killed at shutdown: a and b are discarded as we unwind
    });
    capstan::yield();
  });
  EXPECT_EQ(ran.load(), 0);
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, 2u);
  EXPECT_EQ(s.gcd, 2u);
}

TEST(SparkErrors, ParOutsideRunIsAClearError) {
  try {
    auto s = capstan::par([] { return 1; });
    FAIL() << "par outside run returned";
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("capstan::par"), std::string::npos);
  }
  // The refused spark's closure is destroyed, inline or on the heap.
  auto shared = std::make_shared<int>(1);
  EXPECT_THROW(capstan::par([shared] { return *shared; }), capstan::usage_error);
  EXPECT_THROW(capstan::par([shared, big = std::array<long, 16>{}] { return *shared + big[0]; }),
               capstan::usage_error);
  EXPECT_EQ(shared.use_count(), 1) << "a refused spark's closure was not destroyed";
}

}  // namespace

namespace {

struct interrupt {
  int n;
};

// Note [Evaluating a spark here] (rts/sparks/sparks.cpp): an exception
// from a spark its maker evaluates itself - get() took it from the pool -
// leaves get() as from a call and is not kept as the spark's result; the
// next get() evaluates the spark again.  For an asynchronous exception
// that interrupts the evaluation that is the point: kept as the result,
// the second get() rethrew a stale timeout_expired that no timeout() could
// catch, and the program ended in std::terminate.  At -N1 no other
// capability can take the spark, so get() always evaluates it here.
TEST_F(SparkPool, AnAsyncExceptionInAnInlineEvaluationIsNotTheSparksResult) {
  std::atomic<int> evaluations{0};
  std::string log;
  run(capstan_test::opts(1), [&] {
    // timeout: the timeout_expired interrupts the evaluation.
    // The first evaluation waits until it is interrupted (a 30 ms sleep
    // raced the 2 ms time-out, and main's 5 ms sleep before its throw_to:
    // on a loaded machine the interrupt could come after the evaluation).
    {
      capstan::mvar<int> never;
      std::atomic<bool> first{true};
      auto s = capstan::par([&] {
        evaluations.fetch_add(1);
        if (first.exchange(false)) (void)never.take();
        return 7;
      });
      bool timed_out = !capstan::timeout(std::chrono::milliseconds(2), [&] { return s.get(); });
      log += timed_out ? "timed out;" : "finished;";
      log += "second=" + std::to_string(s.get()) + ";";
    }
    // throw_to from another thread, a type the program defines.
    {
      capstan::mvar<std::string> out;
      capstan::mvar<int> never;
      std::atomic<bool> first{true};
      capstan::thread_id maker = capstan::fork_io([&] {
        auto s = capstan::par([&] {
          evaluations.fetch_add(1);
          if (first.exchange(false)) (void)never.take();
          return 8;
        });
        std::string r;
        try {
          r = "first=" + std::to_string(s.get());
        } catch (const interrupt& i) {
          r = "interrupted " + std::to_string(i.n);
        }
        r += ";second=" + std::to_string(s.get());
        out.put(r);
      });
      // The maker evaluates the spark itself (-N1), blocked in it.
      ASSERT_TRUE(capstan_test::green_wait_until(
          [&] { return capstan::state_of(maker) == capstan::thread_state::blocked; }));
      capstan::throw_to(maker, interrupt{3});
      log += out.take() + ";";
    }
    // The closure's own exception, thrown while its maker evaluates it,
    // goes on the same way: each get() evaluates it and rethrows.
    {
      auto s = capstan::par([&]() -> int {
        evaluations.fetch_add(1);
        throw std::runtime_error("sync");
      });
      for (int i = 0; i < 2; ++i) {
        try {
          s.get();
        } catch (const std::runtime_error& e) {
          log += std::string(e.what()) + ";";
        }
      }
    }
  });
  EXPECT_EQ(log, "timed out;second=7;interrupted 3;second=8;sync;sync;");
  EXPECT_EQ(evaluations.load(), 6) << "each interrupted or throwing evaluation is run again by the next get()";
  auto s = capstan::statistics().sparks;
  EXPECT_EQ(s.created, s.converted + s.fizzled + s.gcd) << "every spark in one category";
}

}  // namespace
