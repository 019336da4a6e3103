// throw_to_test.cpp - throw_to / kill_thread: where an asynchronous
// exception lands, when throw_to returns, and state_of (Note [Raising
// asynchronously] in rts/schedule/raise.cpp).
#include <atomic>
#include <stdexcept>
#include <string>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using capstan_test::green_wait_until;

namespace {

class ThrowTo : public WithCaps {};

struct boom {
  int v;
};

// A thread blocked on an mvar is interrupted at once; its destructors run.
TEST_P(ThrowTo, InterruptsABlockedTakeAndUnwinds) {
  run([] {
    mvar<int> never;
    mvar<int> caught;
    std::atomic<bool> dtor{false};
    struct D {
      std::atomic<bool>* f;
      ~D() { f->store(true); }
    };
    thread_id t = fork_io([&] {
      try {
        D d{&dtor};
        never.take();
      } catch (const boom& b) {
        caught.put(b.v);
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    EXPECT_EQ(state_of(t), thread_state::blocked);
    throw_to(t, boom{7});
    EXPECT_EQ(caught.take(), 7);
    EXPECT_TRUE(dtor.load());
    EXPECT_EQ(never.waiting(), 0u) << "the interrupted taker is still queued";
    // A later put is not taken by the departed thread.
    never.put(1);
    EXPECT_EQ(never.try_take(), 1);
  });
}

// A running thread receives it at its next safe point, and throw_to waits
// for that.
TEST_P(ThrowTo, RunningThreadMeetsItAtASafePoint) {
  run([] {
    std::atomic<bool> started{false}, raised{false};
    std::atomic<long> spins{0};
    thread_id t = fork_io([&] {
      started = true;
      try {
        for (;;) {
          spins.fetch_add(1, std::memory_order_relaxed);
          yield_point();
        }
      } catch (const boom&) {
        raised = true;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return started.load(); }));
    throw_to(t, boom{1});
    // throw_to returned: the exception has been raised, so the loop has
    // stopped for good (the handler itself may still be on its way).
    ASSERT_TRUE(green_wait_until([&] { return raised.load(); }));
    long n = spins.load();
    sleep_for(5ms);
    EXPECT_EQ(spins.load(), n);
  });
}

// kill_thread ends a thread: state_of says died, statistics count it.
TEST_P(ThrowTo, KillThreadAndStateOf) {
  run([] {
    auto before = statistics();
    mvar<int> never;
    thread_id t = fork_io([&] { never.take(); });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(t);
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::died; }));
    thread_id done = fork_io([] {});
    ASSERT_TRUE(green_wait_until([&] { return state_of(done) == thread_state::finished; }));
    EXPECT_EQ(state_of(self()), thread_state::running);
    auto after = statistics();
    EXPECT_EQ(after.threads_killed - before.threads_killed, 1u);
    EXPECT_EQ(after.threads_died - before.threads_died, 1u);
    EXPECT_EQ(after.async_exceptions - before.async_exceptions, 1u);
  });
}

// How a thread ends is settled wherever the exception is caught (Note
// [Where a kill is caught] in rts/schedule/fork.cpp): a kill of a blocked
// thread and of a running one, a thread_killed the thread throws itself,
// one of a class derived from it (rethrown past the fast check), an error,
// and a plain return - each counted once, in its own statistic.
TEST_P(ThrowTo, EveryWayOfEndingIsCountedOnce) {
  struct my_kill : thread_killed {};
  run(capstan_test::opts(caps(), std::chrono::seconds(10)), [] {
    auto before = statistics();
    mvar<int> never;
    std::atomic<bool> spinning{false};
    thread_id blocked = fork_io([&] { never.take(); });
    thread_id running = fork_io([&] {
      spinning = true;
      for (;;) yield();
    });
    thread_id self_killed = fork_io([] { throw thread_killed{}; });
    thread_id derived = fork_io([] { throw my_kill{}; });
    thread_id failed = fork_io([] { throw std::runtime_error("expected in this test"); });
    thread_id returned = fork_io([] {});
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1 && spinning.load(); }));
    kill_thread(blocked);
    kill_thread(running);
    for (thread_id t : {blocked, running, self_killed, derived, failed})
      ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::died; }));
    ASSERT_TRUE(green_wait_until([&] { return state_of(returned) == thread_state::finished; }));
    auto after = statistics();
    EXPECT_EQ(after.threads_killed - before.threads_killed, 4u);
    EXPECT_EQ(after.threads_died - before.threads_died, 5u);
    EXPECT_EQ(after.uncaught_exceptions - before.uncaught_exceptions, 1u);
    EXPECT_EQ(after.async_exceptions - before.async_exceptions, 2u);
  });
}

// Throwing to a finished thread does nothing; to self, throws at once.
TEST_P(ThrowTo, FinishedTargetAndSelf) {
  run([] {
    thread_id t = fork_io([] {});
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::finished; }));
    throw_to(t, boom{1});  // returns: nothing to do
    EXPECT_THROW(throw_to(self(), boom{2}), boom);
    // An id made from a number finds the thread by search.
    mvar<int> never;
    std::atomic<bool> got{false};
    thread_id u = fork_io([&] {
      try {
        never.take();
      } catch (const boom&) {
        got = true;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    throw_to(thread_id{u.value()}, boom{3});
    ASSERT_TRUE(green_wait_until([&] { return got.load(); }));
  });
}

// A thread killed before it ever ran never runs its body.
TEST_P(ThrowTo, KilledBeforeStartingNeverRuns) {
  run(capstan_test::opts(caps(), std::chrono::seconds(10)), [] {
    kill_thread(fork_io([] {}));  // the first throw of a run may yield (Note [Wait locks])
    std::atomic<bool> ran{false};
    // fork_on our own capability at the back of the queue: it cannot start
    // before we kill it (we do not reach a safe point in between).
    thread_id t = fork_on(current_capability(), [&] { ran = true; });
    kill_thread(t);
    EXPECT_FALSE(ran.load());
    EXPECT_EQ(state_of(t), thread_state::died);
  });
}

// thread_killed is not a std::exception.
TEST_P(ThrowTo, CatchStdExceptionDoesNotCatchThreadKilled) {
  run([] {
    mvar<int> never;
    mvar<std::string> how;
    thread_id t = fork_io([&] {
      try {
        try {
          never.take();
        } catch (const std::exception&) {
          how.put("std::exception");
          return;
        }
      } catch (const thread_killed&) {
        how.put("thread_killed");
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(t);
    EXPECT_EQ(how.take(), "thread_killed");
  });
}

// A thread that catches thread_killed and carries on is legal.
TEST_P(ThrowTo, CatchAndCarryOn) {
  run([] {
    mvar<int> never, out;
    thread_id t = fork_io([&] {
      int n = 0;
      for (int i = 0; i < 3; ++i) {
        try {
          never.take();
        } catch (const thread_killed&) {
          ++n;
        }
      }
      out.put(n);
    });
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
      kill_thread(t);
    }
    EXPECT_EQ(out.take(), 3);
  });
}

// A put racing with a kill never loses the value: the taker either got it
// (and the exception comes at its next safe point) or the value stays.
TEST_P(ThrowTo, PutRacingKillNeverLosesTheValue) {
  run([] {
    for (int round = 0; round < 300 / capstan_test::kScale + 20; ++round) {
      mvar<int> box;
      std::atomic<int> got{0};
      mvar<int> done;
      thread_id t = fork_io([&] {
        try {
          got = box.take();
          yield();  // a safe point: a pending kill lands here
        } catch (const thread_killed&) {
        }
        done.put(1);
      });
      ASSERT_TRUE(green_wait_until([&] { return box.waiting() == 1; }));
      fork_io([&] { box.put(5); });
      if (round % 2) yield();
      kill_thread(t);
      done.take();
      // Either the taker got the value, or it is still in the mvar (the
      // put may also still be on its way).
      ASSERT_TRUE(green_wait_until([&] { return got.load() == 5 || !box.is_empty(); }));
      EXPECT_TRUE(got.load() == 5 ? box.is_empty() : box.try_take() == 5);
    }
  });
}

// A thread inside safe_call receives it when the call returns.
TEST_P(ThrowTo, SafeCallReceivesItOnReturn) {
  run([] {
    std::atomic<bool> in_call{false}, release{false}, after{false}, caught{false};
    thread_id t = fork_io([&] {
      try {
        safe_call([&] {
          in_call = true;
          while (!release.load()) std::this_thread::yield();
        });
        after = true;
      } catch (const boom&) {
        caught = true;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return in_call.load(); }));
    // Release the call only once main waits in throw_to (not after a
    // 20 ms sleep: main descheduled that long at -N2 and up threw to a
    // thread that had returned and finished, and nothing was caught).
    const thread_id me = self();
    fork_io([&, me] {
      (void)green_wait_until([&] { return state_of(me) == thread_state::blocked; });
      release = true;
    });
    throw_to(t, boom{0});
    EXPECT_TRUE(release.load()) << "throw_to returned while the target was still in its safe call";
    ASSERT_TRUE(green_wait_until([&] { return caught.load(); }));
    EXPECT_FALSE(after.load());
  });
}

// Bad ids get a clear error; off a green thread, a usage_error.
TEST_P(ThrowTo, MisuseIsReported) {
  run([] {
    EXPECT_THROW(kill_thread(thread_id{}), usage_error);
    EXPECT_THROW(state_of(thread_id{1u << 30}), usage_error);
  });
  EXPECT_THROW(kill_thread(thread_id{1}), usage_error);
}

CAPSTAN_INSTANTIATE_CAPS(ThrowTo);

// Note [Wait locks]: the run's first throw turns the wait locks on, and
// waits only for writes in progress - not for a thread on another
// capability that computes without a safe point.  The hog stops only when
// told (or after 10 s); main kills a blocked thread first, then tells it.
// A kill that waited for the hog's next scheduling decision would return
// only after the hog's 10 s were up.
TEST(WaitLocks, TheFirstThrowDoesNotWaitForAHog) {
  std::atomic<bool> hog_started{false}, stop{false}, hog_done{false};
  bool hog_ran_through_the_kill = false;
  run(capstan_test::opts(2), [&] {
    thread_id hog = fork_on(1, [&] {
      hog_started.store(true);
      auto end = std::chrono::steady_clock::now() + 10s;
      while (!stop.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < end) {
      }
      hog_done.store(true);
    });
    (void)hog;
    mvar<int> never;
    thread_id victim = fork_on(0, [&] { never.take(); });
    ASSERT_TRUE(green_wait_until([&] { return hog_started.load(); }));
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(victim);  // the run's first throw
    hog_ran_through_the_kill = !hog_done.load();
    stop.store(true);
    EXPECT_TRUE(green_wait_until([&] { return state_of(victim) == thread_state::died; }));
  });
  EXPECT_TRUE(hog_ran_through_the_kill) << "the first kill waited for the hog to stop";
}

}  // namespace
