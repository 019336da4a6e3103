// schedule_test.cpp - the requeue rules of Note [Requeue front or back],
// cross-capability wake-ups and Note [Pushing work].
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "capstan_test.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"

namespace {

struct Log {
  std::mutex mu;
  std::vector<std::string> v;
  void add(std::string s) {
    std::lock_guard<std::mutex> g(mu);
    v.push_back(std::move(s));
  }
};

using Order = std::vector<std::string>;

class Requeue : public capstan_test::RuntimeTest {};

// The rules other than the timeslice one are tested with a timeslice no run
// of these tests reaches, even slowed down by a sanitizer: an expired slice
// would requeue a thread at its next safe point and change the order.
constexpr std::chrono::microseconds kNoTimeslice = std::chrono::seconds(30);
class Wakeups : public capstan_test::RuntimeTest {};
class PushWork : public capstan_test::RuntimeTest {};

TEST_F(Requeue, NewThreadsAndYieldGoToTheBack) {
  Log log;
  run(capstan_test::opts(1, kNoTimeslice), [&] {
    capstan::mvar<int> done;
    for (const char* name : {"A", "B", "C"}) {
      capstan::fork_io([&, name] {
        log.add(std::string(name) + "1");
        capstan::yield();
        log.add(std::string(name) + "2");
        done.put(1);
      });
    }
    for (int i = 0; i < 3; ++i) done.take();
  });
  EXPECT_EQ(log.v, (Order{"A1", "B1", "C1", "A2", "B2", "C2"}));
}

// A yield with nothing else to run leaves the thread running where it was
// (Note [A yield rotates in one hand-shake]: it was never queued, and its
// marks are taken back); the next yield, with a thread waiting, rotates.
TEST_F(Requeue, AYieldWithNothingElseToRunKeepsTheThreadRunning) {
  Log log;
  run(capstan_test::opts(1, kNoTimeslice), [&] {
    for (int i = 0; i < 1000; ++i) capstan::yield();
    EXPECT_EQ(capstan::state_of(capstan::self()), capstan::thread_state::running);
    capstan::mvar<int> done;
    capstan::fork_io([&] {
      log.add("B1");
      capstan::yield();  // main is queued behind: it runs next
      log.add("B2");
      done.put(1);
    });
    log.add("A1");
    capstan::yield();  // B runs
    log.add("A2");
    capstan::yield();  // B again
    log.add("A3");
    done.take();
    for (int i = 0; i < 1000; ++i) capstan::yield();
    EXPECT_EQ(capstan::state_of(capstan::self()), capstan::thread_state::running);
  });
  EXPECT_EQ(log.v, (Order{"A1", "B1", "A2", "B2", "A3"}));
}

TEST_F(Requeue, AWokenThreadGoesToTheBack) {
  Log log;
  run(capstan_test::opts(1, kNoTimeslice), [&] {
    capstan::mvar<int> m, done;
    capstan::fork_io([&] {
      m.take();
      log.add("A woken");
      done.put(1);
    });
    capstan::fork_io([&] {
      log.add("B put");
      m.put(1);  // wakes A: A goes behind C
      log.add("B continues");
      capstan::yield();
      log.add("B after yield");
      done.put(1);
    });
    capstan::fork_io([&] {
      log.add("C");
      done.put(1);
    });
    for (int i = 0; i < 3; ++i) done.take();
  });
  EXPECT_EQ(log.v, (Order{"B put", "B continues", "C", "A woken", "B after yield"}));
}

TEST_F(Requeue, AnExpiredTimesliceGoesToTheBack) {
  std::atomic<bool> b_ran{false};
  long spins_before_b = 0;
  run(capstan_test::opts(1, std::chrono::microseconds(1000)), [&] {
    capstan::mvar<int> done;
    capstan::fork_io([&] {
      // Only the ticker can let B run: we never yield or block.
      while (!b_ran.load()) {
        ++spins_before_b;
        capstan::yield_point();
      }
      done.put(1);
    });
    capstan::fork_io([&] {
      b_ran = true;
      done.put(1);
    });
    done.take();
    done.take();
  });
  EXPECT_TRUE(b_ran.load());
  EXPECT_GT(spins_before_b, 0);
}

TEST_F(Requeue, AnInterruptedThreadKeepsTheFront) {
  std::atomic<bool> b_ran{false};
  bool b_ran_during_interrupt = true;
  run(capstan_test::opts(1, kNoTimeslice), [&] {
    capstan::mvar<int> done;
    capstan::fork_io([&] {
      // A stop-the-world style interrupt: we stop at the next safe point
      // but keep our place, so B (queued behind us) still has not run.
      capstan::rts::interrupt_capability(capstan::rts::rt.caps[0]);
      capstan::yield_point();
      b_ran_during_interrupt = b_ran.load();
      capstan::yield();  // an ordinary yield: now B runs
      done.put(1);
    });
    capstan::fork_io([&] {
      b_ran = true;
      done.put(1);
    });
    done.take();
    done.take();
  });
  EXPECT_FALSE(b_ran_during_interrupt);
  EXPECT_TRUE(b_ran.load());
}

TEST_F(Wakeups, ALockedThreadIsWokenOnItsOwnCapabilityThroughTheInbox) {
  unsigned woke_on = 99;
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> m, done;
    capstan::fork_on(1, [&] {
      m.take();
      woke_on = capstan::current_capability();
      done.put(1);
    });
    while (m.waiting() == 0) capstan::yield();
    EXPECT_EQ(capstan::current_capability(), 0u);
    m.put(1);  // from capability 0
    done.take();
  });
  EXPECT_EQ(woke_on, 1u);
  auto s = capstan::statistics();
  EXPECT_GE(s.capabilities[1].threads_received, 1u);
}

// fork_on takes any unsigned capability number modulo -N.  Numbers of 2^31
// and above were cast to int on the way in: UINT_MAX - 1 became fork_os
// (a new OS thread, bound) and UINT_MAX fork_io (not locked, on the
// forker's capability).
TEST_F(Wakeups, ForkOnTakesEveryCapabilityNumberModuloN) {
  run(capstan_test::opts(2), [&] {
    for (unsigned n : {0u, 1u, 2u, 3u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) {
      capstan::mvar<int> where;
      capstan::mvar<bool> bound;
      capstan::fork_on(n, [&] {
        capstan::yield();  // a locked thread stays on its capability
        bound.put(capstan::is_bound());
        where.put(static_cast<int>(capstan::current_capability()));
      });
      EXPECT_FALSE(bound.take()) << n;
      EXPECT_EQ(where.take(), static_cast<int>(n % 2)) << n;
    }
  });
}

TEST_F(Wakeups, AnUnlockedThreadFollowsItsWaker) {
  unsigned blocked_on = 99, woke_on = 99;
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> m, done, placed;
    capstan::fork_on(1, [&] {
      // An unlocked thread forked from capability 1 starts there.
      capstan::fork_io([&] {
        blocked_on = capstan::current_capability();
        placed.put(1);
        m.take();
        woke_on = capstan::current_capability();
        done.put(1);
      });
    });
    placed.take();
    while (m.waiting() == 0) capstan::yield();
    m.put(1);  // main runs on capability 0: the woken thread joins us
    done.take();
  });
  // A capability whose OS thread is descheduled for a millisecond has its
  // queue stolen by the idle other (steal_test.cpp): the placements then
  // say nothing about the rule.
  std::uint64_t stolen = 0;
  for (const auto& c : capstan::statistics().capabilities) stolen += c.threads_stolen;
  if (stolen != 0) GTEST_SKIP() << "a stalled capability's thread was stolen";
  EXPECT_EQ(blocked_on, 1u);
  EXPECT_EQ(woke_on, 0u);
}

// A backlog that lasts: the threads keep yielding (the run queue of
// capability 0 stays long) until one of them has run on capability 1, so
// they can have got there only by a push (or a steal, see below); if none
// ever does, they give up
// after kWaitGuard and the test fails.
TEST_F(PushWork, IdleCapabilitiesReceiveSurplusThreads) {
  std::atomic<int> on_cap1{0};
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> done;
    // Capability 1's OS thread may still be starting (a loaded CI machine):
    // a thread locked there tells us when it runs.
    capstan::mvar<int> started;
    capstan::fork_on(1, [&] { started.put(1); });
    started.take();
    constexpr int kThreads = 200;
    for (int i = 0; i < kThreads; ++i) {
      capstan::fork_io([&] {
        capstan_test::green_wait_until([&] {
          if (capstan::current_capability() == 1) on_cap1.fetch_add(1);
          return on_cap1.load() > 0;
        });
        done.put(1);
      });
    }
    for (int i = 0; i < kThreads; ++i) done.take();
  });
  EXPECT_GT(on_cap1.load(), 0);
  auto s = capstan::statistics();
  // Pushed, normally; or stolen, when the OS preempted capability 0's OS
  // thread long enough for it to look stalled (Note [Stealing from a
  // stalled capability]) - a loaded machine does that.
  EXPECT_GT(s.capabilities[0].threads_pushed + s.capabilities[1].threads_stolen, 0u);
}

// After the start-up shuffle both end up together and stay there: a
// ping-pong never has two threads waiting, so it is never pushed apart
// (Note [Pushing work]), and each wake-up joins the waker (Note [Wake-up
// affinity]).  In the second half of the hand-offs they are together on
// nearly every round and hardly ever move.  Not on every round: on a loaded
// machine the OS may preempt the capability's OS thread for longer than
// the stall threshold, and an idle capability then takes the waiting
// thread (Note [Stealing from a stalled capability]); the next wake-up
// brings it back.  Pushing them apart would put them on different
// capabilities on about every round.
TEST_F(PushWork, APingPongStaysOnOneCapability) {
  constexpr int kRounds = 20000;
  std::vector<unsigned char> cap_a(kRounds), cap_b(kRounds);
  run(capstan_test::opts(2), [&] {
    capstan::mvar<int> ping, pong, done;
    capstan::fork_io([&] {
      for (int i = 0; i < kRounds; ++i) {
        ping.put(i);
        pong.take();
        cap_a[i] = static_cast<unsigned char>(capstan::current_capability());
      }
      done.put(1);
    });
    capstan::fork_io([&] {
      for (int i = 0; i < kRounds; ++i) {
        int v = ping.take();
        cap_b[i] = static_cast<unsigned char>(capstan::current_capability());
        pong.put(v);
      }
      done.put(1);
    });
    done.take();
    done.take();
  });
  int apart = 0, moves = 0;
  for (int i = kRounds / 2; i < kRounds; ++i) {
    if (cap_a[i] != cap_b[i]) ++apart;
    if (cap_a[i] != cap_a[i - 1]) ++moves;
  }
  EXPECT_LE(apart, kRounds / 2 / 100) << "ping and pong ran on different capabilities";
  EXPECT_LE(moves, 20) << "ping moved between capabilities";
}

}  // namespace
