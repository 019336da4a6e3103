// async_test.cpp - async<R>, race, concurrently, map_concurrently: results,
// exceptions, and cancellation of threads that are blocked or masked (Note
// [Async threads] in capstan/async.hpp).
#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <ranges>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using capstan_test::green_wait_until;

namespace {

class Async : public WithCaps {};

// counts destructors run by a cancelled thread's unwinding.
struct count_on_exit {
  std::atomic<int>* n;
  ~count_on_exit() { n->fetch_add(1); }
};

// A closure whose move throws at the k-th move (counted across all).
std::atomic<int> g_moves{0};
std::atomic<int> g_throw_at{-1};
struct move_bomb {
  move_bomb() = default;
  move_bomb(const move_bomb&) = default;
  move_bomb(move_bomb&&) {
    if (g_moves.fetch_add(1) == g_throw_at.load()) throw std::runtime_error("move");
  }
  int operator()() const { return 7; }
};

// Making the child's closure, or moving it into the new thread, may throw:
// async's constructor then rethrows, and the group it leaves behind has a
// report for every child it counted, so its destructor does not wait for
// ever (the closure left behind reports when the move into the thread
// throws; nothing is counted when making the closure throws).
TEST_P(Async, AClosureWhoseMoveThrowsLeavesNothingWaiting) {
  run([] {
    int threw = 0, ran = 0;
    for (int k = 0; k < 6; ++k) {
      g_moves = 0;
      g_throw_at = k;
      try {
        async a(move_bomb{});
        EXPECT_EQ(a.wait(), 7);
        ++ran;
      } catch (const std::runtime_error&) {
        ++threw;
      }
    }
    g_throw_at = -1;
    EXPECT_GE(threw, 2) << "both the closure's making and its move into the thread should have thrown once";
    EXPECT_GE(ran, 1);
  });
}

TEST_P(Async, WaitReturnsTheResultOnce) {
  run([] {
    async a([] { return std::string("forty-two"); });
    static_assert(std::is_same_v<decltype(a), async<std::string>>);
    EXPECT_EQ(a.wait(), "forty-two");
    EXPECT_TRUE(a.ready());
    EXPECT_THROW(a.wait(), usage_error);
    async v([] {});
    v.wait();
  });
}

TEST_P(Async, WaitRethrowsTheException) {
  run([] {
    async a([]() -> int { throw std::runtime_error("bad"); });
    EXPECT_THROW(a.wait(), std::runtime_error);
  });
}

// The completion report racing with the waiter parking (Note [Async
// threads]): no wait hangs, and a cancel racing with the end either keeps
// the result or reports the kill.
TEST_P(Async, WaitAndCancelRacingTheEnd) {
  run([] {
    const int rounds = 3000 / capstan_test::kScale;
    int killed = 0;
    for (int i = 0; i < rounds; ++i) {
      async a([i] {
        if (i % 3 == 0) yield();
        return i;
      });
      if (i % 2) yield();
      if (i % 5 == 0) {
        a.cancel();
        try {
          EXPECT_EQ(a.wait(), i);
        } catch (const thread_killed&) {
          ++killed;
        }
      } else {
        ASSERT_EQ(a.wait(), i);
      }
    }
    EXPECT_LE(killed, rounds / 5 + 1);
  });
}

// Note [Sharing an async]: one thread waits while another - a watchdog -
// cancels, in every order with the child's end; neither hangs (it did:
// both read the one report), the waiter gets the result or thread_killed,
// and the watchdog's cancel returns once the child has finished.
TEST_P(Async, AWatchdogCancelsWhileTheOwnerWaits) {
  run([] {
    const int rounds = 2000 / capstan_test::kScale;
    int killed = 0, returned = 0;
    for (int i = 0; i < rounds; ++i) {
      async a([i] {
        if (i % 3 == 0) yield();
        if (i % 7 == 0) sleep_for(1ms);
        return i;
      });
      std::atomic<bool> child_done_seen{false};
      async watchdog([&] {
        if (i % 2) yield();
        a.cancel();
        child_done_seen = a.ready();  // cancel returns once the child has finished
      });
      try {
        EXPECT_EQ(a.wait(), i);
        ++returned;
      } catch (const thread_killed&) {
        ++killed;
      }
      watchdog.wait();
      EXPECT_TRUE(child_done_seen.load()) << "round " << i;
    }
    EXPECT_EQ(killed + returned, rounds);
  });
}

// A second wait() made while the first still waits, from another thread,
// is the usage_error a second wait() is, once the first has the result;
// the first gets it.
TEST_P(Async, ASecondConcurrentWaitIsAUsageError) {
  run([] {
    // No sleeps: "main is waiting by now" after 5 ms did not hold on a
    // loaded machine (main descheduled, or slow under a sanitizer), and
    // then `second` made the first wait and main's wait threw.  The child
    // finishes only once `second` is itself waiting, behind main.
    mvar<int> gate;
    const thread_id main_thread = self();
    async a([&] {
      gate.take();
      return 7;
    });
    async second([&] {
      // main blocks only in its wait(), the first.
      EXPECT_TRUE(green_wait_until([&] { return state_of(main_thread) == thread_state::blocked; }));
      const thread_id me = self();
      async release([&] {  // once this wait() is queued behind main's
        EXPECT_TRUE(green_wait_until([&] { return state_of(me) == thread_state::blocked; }));
        gate.put(1);
      });
      std::string what;
      try {
        a.wait();
        what = "second wait returned";
      } catch (const usage_error& e) {
        what = e.what();
      }
      release.wait();
      return what;
    });
    EXPECT_EQ(a.wait(), 7);
    EXPECT_NE(second.wait().find("already taken by an earlier wait()"), std::string::npos);
  });
}

// A child's closure (what it captured) is destroyed before the call that
// started it returns.
TEST_P(Async, ChildClosuresAreGoneOnReturn) {
  run([] {
    auto token = std::make_shared<int>(0);
    mvar<int> never;
    auto r = race([token, &never] { return never.take(); }, [token] { return 1; });
    EXPECT_EQ(r.index(), 1u);
    EXPECT_EQ(token.use_count(), 1);
    map_concurrently(std::views::iota(0, 8), [token](int i) { return i; });
    EXPECT_EQ(token.use_count(), 1);
    {
      async a([token] { return *token; });
      a.wait();
    }
    EXPECT_EQ(token.use_count(), 1);
  });
}

TEST_P(Async, ReadyOnlyOnceFinished) {
  run([] {
    mvar<int> gate;
    async a([&] { return gate.take() + 1; });
    ASSERT_TRUE(green_wait_until([&] { return state_of(a.id()) == thread_state::blocked; }));
    EXPECT_FALSE(a.ready());
    gate.put(1);
    ASSERT_TRUE(green_wait_until([&] { return a.ready(); }));
    EXPECT_EQ(a.wait(), 2);
  });
}

// cancel interrupts a thread blocked on an mvar, a sleep or a chan read,
// and returns only once it has unwound and finished.
TEST_P(Async, CancelInterruptsBlockedThreads) {
  run([] {
    std::atomic<int> unwound{0};
    mvar<int> m;
    chan<int> c;
    async a([&] { count_on_exit e{&unwound}; return m.take(); });
    async b([&] { count_on_exit e{&unwound}; sleep_for(1h); });
    async d([&] { count_on_exit e{&unwound}; return c.read(); });
    for (thread_id t : {a.id(), b.id(), d.id()})
      ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::blocked; }));
    a.cancel();
    EXPECT_EQ(unwound.load(), 1);
    b.cancel();
    EXPECT_EQ(unwound.load(), 2);
    d.cancel();
    EXPECT_EQ(unwound.load(), 3);
    EXPECT_EQ(state_of(a.id()), thread_state::finished);  // it caught the kill into its slot
    EXPECT_THROW(a.wait(), thread_killed);
    EXPECT_EQ(m.waiting(), 0u);
    EXPECT_EQ(c.waiting(), 0u);
  });
}

// A masked thread blocked interruptibly is cancelled; one in
// uninterruptible_mask is waited for until it leaves the mask.
TEST_P(Async, CancelAndMasks) {
  run([] {
    mvar<int> m;
    async a([&] { return mask([&] { return m.take(); }); });
    ASSERT_TRUE(green_wait_until([&] { return m.waiting() == 1; }));
    a.cancel();
    EXPECT_THROW(a.wait(), thread_killed);

    mvar<int> gate;
    std::atomic<bool> finished_mask{false};
    async b([&] {
      uninterruptible_mask([&] {
        gate.take();
        finished_mask.store(true);
      });
    });
    ASSERT_TRUE(green_wait_until([&] { return gate.waiting() == 1; }));
    thread_id me = self();
    fork_io([&] {  // opens the gate once we wait in cancel's throw_to
      EXPECT_TRUE(green_wait_until([&] { return state_of(me) == thread_state::blocked; }));
      gate.put(0);
    });
    b.cancel();  // waits until b left its mask and died
    EXPECT_TRUE(finished_mask.load());
    EXPECT_THROW(b.wait(), thread_killed);
  });
}

// Cancelling a finished thread keeps its result.
TEST_P(Async, CancelAfterFinishKeepsTheResult) {
  run([] {
    async a([] { return 3; });
    ASSERT_TRUE(green_wait_until([&] { return a.ready(); }));
    a.cancel();
    EXPECT_EQ(a.wait(), 3);
  });
}

TEST_P(Async, DestructorCancels) {
  run([] {
    std::atomic<int> unwound{0};
    mvar<int> never;
    thread_id t;
    {
      async a([&] { count_on_exit e{&unwound}; never.take(); });
      t = a.id();
      ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    }
    EXPECT_EQ(unwound.load(), 1);
    EXPECT_EQ(state_of(t), thread_state::finished);  // it caught the kill into its slot
    // Assigning over an async cancels the one it held.
    async b([&] { count_on_exit e{&unwound}; never.take(); });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    b = async([] {});
    EXPECT_EQ(unwound.load(), 2);
    b.wait();
  });
}

// A scope left while its child is blocked for ever under
// uninterruptible_mask: ~async's cancel waits, deadlock detection raises
// in the child (not in the cancel: Note [Breaking a deadlock]), and the
// scope ends.  ~async used to get blocked_indefinitely from its kill:
// std::terminate, every run.  Three deadlocks in a row: the ticker once
// parked on the tick that broke one and missed the next (rts/runtime/ticker.cpp).
TEST_P(Async, LeavingAScopeWhoseChildIsDeadlockedUnderUninterruptibleMask) {
  run([] {
    mvar<int> never;
    bool left = false;
    {
      async a([&] { uninterruptible_mask([&] { never.take(); }); });
      ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    }
    left = true;
    EXPECT_TRUE(left);
    async b([&] { uninterruptible_mask([&] { never.take(); }); });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    EXPECT_NO_THROW(b.cancel());
    EXPECT_THROW(b.wait(), blocked_indefinitely);
    auto r = race([] { return 1; }, [&] { return uninterruptible_mask([&] { return never.take(); }); });
    EXPECT_EQ(r.index(), 0u);
  });
}

TEST_P(Async, MoveOnly) {
  run([] {
    static_assert(!std::is_copy_constructible_v<async<int>>);
    async a([] { return 5; });
    async b = std::move(a);
    EXPECT_THROW(a.wait(), usage_error);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.wait(), 5);
  });
}

// A thread killed while it waits cancels its asyncs as it unwinds.
TEST_P(Async, KilledWaiterCancelsItsChildren) {
  run([] {
    std::atomic<int> unwound{0};
    mvar<int> never;
    mvar<int> seen_in_handler;
    thread_id parent = fork_io([&] {
      try {
        async a([&] { count_on_exit e{&unwound}; never.take(); });
        async b([&] { count_on_exit e{&unwound}; never.take(); });
        a.wait();
      } catch (const thread_killed&) {
        seen_in_handler.put(unwound.load());
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 2; }));
    ASSERT_TRUE(green_wait_until([&] { return state_of(parent) == thread_state::blocked; }));
    kill_thread(parent);
    EXPECT_EQ(seen_in_handler.take(), 2);
  });
}

// main returns while threads wait inside async scopes on blocked children:
// shutdown kills them all, the scopes' cancels unwind their children, and
// the run ends cleanly (the fixture checks nothing was abandoned).
TEST_P(Async, ShutdownWithScopesBlocked) {
  std::atomic<int> unwound{0}, started{0};
  run([&] {
    static mvar<int> never;  // outlives the forked threads
    for (int i = 0; i < 4; ++i)
      fork_io([&] {
        async a([&] { ++started; count_on_exit e{&unwound}; never.take(); });
        race([&] { ++started; count_on_exit e{&unwound}; never.take(); },
             [&] { ++started; count_on_exit e{&unwound}; sleep_for(1h); });
      });
    // Every body started: a sleeper not yet run when main returns would be
    // reclaimed unstarted, with nothing to unwind.
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 8 && started.load() == 12; }));
  });
  EXPECT_EQ(unwound.load(), 12);
}

TEST_P(Async, RaceFirstWinsEitherWay) {
  run([] {
    std::atomic<int> unwound{0};
    mvar<int> never;
    auto r1 = race([] { return 1; }, [&] { count_on_exit e{&unwound}; return never.take(); });
    EXPECT_EQ(r1.index(), 0u);
    EXPECT_EQ(std::get<0>(r1), 1);
    EXPECT_EQ(unwound.load(), 1) << "the loser has not finished when race returned";
    auto r2 = race([&] { count_on_exit e{&unwound}; sleep_for(1h); }, [] { return std::string("b"); });
    static_assert(std::is_same_v<decltype(r2), std::variant<std::monostate, std::string>>);
    EXPECT_EQ(r2.index(), 1u);
    EXPECT_EQ(std::get<1>(r2), "b");
    EXPECT_EQ(unwound.load(), 2);
    EXPECT_EQ(never.waiting(), 0u);
  });
}

TEST_P(Async, RaceRethrowsAfterCancellingTheOther) {
  run([] {
    std::atomic<int> unwound{0};
    chan<int> c;
    int seen = -1;
    try {
      race([&] { count_on_exit e{&unwound}; return c.read(); },
           []() -> int { throw std::invalid_argument("g"); });
    } catch (const std::invalid_argument&) {
      seen = unwound.load();
    }
    EXPECT_EQ(seen, 1);
    EXPECT_EQ(c.waiting(), 0u);
  });
}

TEST_P(Async, ConcurrentlyReturnsBoth) {
  run([] {
    mvar<int> a2b, b2a;
    auto [x, y] = concurrently([&] { a2b.put(1); return b2a.take() * 10; },
                               [&] { b2a.put(2); return a2b.take() * 100; });
    EXPECT_EQ(x, 20);
    EXPECT_EQ(y, 100);
    auto p = concurrently([] {}, [] { return 'c'; });
    EXPECT_EQ(p.second, 'c');
  });
}

TEST_P(Async, ConcurrentlyExceptionCancelsTheOther) {
  run([] {
    std::atomic<int> unwound{0};
    mvar<int> never;
    int seen = -1;
    try {
      concurrently([&] { count_on_exit e{&unwound}; mask([&] { never.take(); }); },
                   []() -> int { throw std::runtime_error("x"); });
    } catch (const std::runtime_error&) {
      seen = unwound.load();
    }
    EXPECT_EQ(seen, 1);
  });
}

TEST_P(Async, MapConcurrentlyKeepsInputOrder) {
  run([] {
    std::vector<int> in{5, 3, 8, 1, 9, 2};
    std::vector<int> out = map_concurrently(in, [](int& x) {
      for (int i = 0; i < x; ++i) yield();
      return x * 2;
    });
    EXPECT_EQ(out, (std::vector<int>{10, 6, 16, 2, 18, 4}));
    auto sq = map_concurrently(std::views::iota(0, 50), [](int i) { return i * i; });
    ASSERT_EQ(sq.size(), 50u);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(sq[i], i * i);
    std::atomic<int> calls{0};
    map_concurrently(in, [&](int) { calls.fetch_add(1); });
    EXPECT_EQ(calls.load(), 6);
    EXPECT_TRUE(map_concurrently(std::vector<int>{}, [](int i) { return i; }).empty());
  });
}

TEST_P(Async, MapConcurrentlyExceptionCancelsTheRest) {
  run([] {
    std::atomic<int> unwound{0};
    chan<int> never;
    int seen = -1;
    try {
      map_concurrently(std::views::iota(0, 20), [&](int i) -> int {
        if (i == 13) {
          while (never.waiting() < 19) yield();
          throw std::out_of_range("13");
        }
        count_on_exit e{&unwound};
        return never.read();
      });
    } catch (const std::out_of_range&) {
      seen = unwound.load();
    }
    EXPECT_EQ(seen, 19);
    EXPECT_EQ(never.waiting(), 0u);
  });
}

}  // namespace

CAPSTAN_INSTANTIATE_CAPS(Async);

namespace {

// Note [Shutdown and uninterruptible_mask]: shutdown begins while ~async
// waits for its child (which takes 20 ms to unwind).  The wait is under
// uninterruptible_mask, and shutdown's kill used to ignore that: it threw
// thread_killed out of the implicitly noexcept destructor, and the process
// died in std::terminate.  Now shutdown leaves the wait alone, kills the
// child, and the destructor returns once the child has finished.
TEST_P(Async, ShutdownWhileAScopeWaitsForItsChildDoesNotTerminate) {
  std::atomic<bool> child_unwound{false}, scope_left{false};
  std::atomic<bool> in_destructor{false};
  run([&] {
    capstan::fork_io([&] {
      {
        capstan::async a([&] {
          struct slow_cleanup {
            std::atomic<bool>* done;
            ~slow_cleanup() {
              capstan::sleep_for(20ms);
              *done = true;
            }
          } c{&child_unwound};
          capstan::sleep_for(std::chrono::hours(1));
        });
        capstan::sleep_for(2ms);
        in_destructor = true;
      }  // ~async: kills the child, waits ~20 ms for it
      scope_left = true;
    });
    ASSERT_TRUE(green_wait_until([&] { return in_destructor.load(); }));
    capstan::sleep_for(5ms);  // shutdown begins while ~async waits
  });
  EXPECT_TRUE(child_unwound.load());
  EXPECT_TRUE(scope_left.load()) << "the scope's thread did not leave ~async";
  EXPECT_EQ(capstan::statistics().threads_abandoned, 0u);
}

}  // namespace

namespace {

// An async kept past the run() that started it: its thread ended with
// that run (shutdown killed it, and its report is in).  Destroying it
// afterwards, on the plain thread or in a later run, was std::terminate
// (~async masked, which needs a green thread; in a later run kill_thread
// refused the earlier run's id); now it only reads the report.  wait() in
// a later run returns what the thread left; off the runtime, wait and
// cancel are errors that name themselves.
TEST_P(Async, AnAsyncKeptPastItsRunIsDestroyedQuietly) {
  std::optional<capstan::async<int>> sleeper, done, sleeper2, done2;
  std::atomic<int> unwound{0};
  run([&] {
    auto sleep_long = [&] {
      count_on_exit c{&unwound};
      capstan::sleep_for(std::chrono::hours(1));
      return 1;
    };
    sleeper.emplace(sleep_long);
    sleeper2.emplace(sleep_long);
    done.emplace([] { return 5; });
    done2.emplace([] { return 6; });
    while (!done->ready() || !done2->ready()) capstan::yield();
  });
  EXPECT_EQ(unwound.load(), 2);  // shutdown killed both sleepers
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const capstan::usage_error& e) {
      return e.what();
    }
    return "(no usage_error)";
  };
  EXPECT_NE(message([&] { done->wait(); }).find("capstan::async::wait"), std::string::npos);
  EXPECT_NE(message([&] { done->cancel(); }).find("capstan::async::cancel"), std::string::npos);
  sleeper.reset();  // on the plain thread: reads the report, no terminate
  done.reset();
  run([&] {
    EXPECT_EQ(done2->wait(), 6);
    EXPECT_NO_THROW(sleeper2->cancel());
    EXPECT_THROW(sleeper2->wait(), capstan::thread_killed);
    sleeper2.reset();  // in a later run
    done2.reset();
  });
}

// Destroying an async on a plain OS thread while its thread still runs
// cannot cancel nor wait: it says so and aborts, instead of leaving the
// thread to report into a destroyed group.
TEST(AsyncDeathTest, DestroyedOnAPlainThreadWhileItsThreadRuns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        capstan::run(capstan_test::opts(1), [] {
          auto a = std::make_unique<capstan::async<int>>([] {
            capstan::sleep_for(std::chrono::hours(1));
            return 1;
          });
          std::thread os([&] { a.reset(); });
          os.join();
        });
      },
      "capstan::async: destroyed on an OS thread that runs no green thread while its thread "
      "still runs");
}

}  // namespace
