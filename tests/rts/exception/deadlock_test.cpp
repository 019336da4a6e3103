// deadlock_test.cpp - deadlock detection (Note [Deadlock detection] in
// rts/exception/deadlock.cpp): blocked_indefinitely when nothing can wake
// anyone, and never while something could.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"
#include "primitives/clock.hpp"
#include "primitives/fault_injection.hpp"
#include "runtime/runtime.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using capstan_test::green_wait_until;

namespace {

class Deadlock : public WithCaps {};

TEST_P(Deadlock, MainBlockedForeverGetsBlockedIndefinitely) {
  EXPECT_THROW(run([] {
                 mvar<int> never;
                 never.take();
               }),
               blocked_indefinitely);
  EXPECT_EQ(statistics().deadlocks_detected, 1u);
}

// A fork_os thread's Task leaves its capability free when the thread
// finishes; a free capability with nothing queued is at rest, not busy, so
// the deadlock behind it is still found (it used to hang for ever).
TEST_P(Deadlock, FoundAfterABoundThreadLeftItsCapabilityFree) {
  EXPECT_THROW(run([] {
                 mvar<int> never;
                 fork_os([] {});
                 never.take();
               }),
               blocked_indefinitely);
  EXPECT_EQ(statistics().deadlocks_detected, 1u);
}

// Every blocked thread gets it, forked ones end quietly, main can catch it.
TEST_P(Deadlock, EveryBlockedThreadIsWoken) {
  run([] {
    mvar<int> a, b;
    std::atomic<int> woken{0};
    for (int i = 0; i < 10; ++i)
      fork_io([&] {
        try {
          a.take();
        } catch (const blocked_indefinitely&) {
          woken.fetch_add(1);
        }
      });
    // Masked threads too (GHC raises it whatever the mask).
    fork_io([&] {
      uninterruptible_mask([&] {
        try {
          b.take();
        } catch (const blocked_indefinitely&) {
          woken.fetch_add(1);
        }
      });
    });
    bool main_woken = false;
    try {
      mvar<int>().take();
    } catch (const blocked_indefinitely&) {
      main_woken = true;
    }
    EXPECT_TRUE(main_woken);
    ASSERT_TRUE(green_wait_until([&] { return woken.load() == 11; }));
    EXPECT_EQ(statistics().deadlocks_detected, 1u);
    // Each blocked_indefinitely is an asynchronous exception raised.
    EXPECT_EQ(statistics().async_exceptions, 12u);
  });
}

// Note [Breaking a deadlock]: a thread blocked in kill_thread is left
// alone while its target, blocked under uninterruptible_mask, is raised;
// the target ends, and the kill returns.  (The killer was raised too: a
// cancel, which kills under uninterruptible_mask, threw
// blocked_indefinitely, and ~async terminated the program.)
TEST_P(Deadlock, AKillerWaitingForItsDeadlockedTargetIsLeftAlone) {
  std::atomic<bool> target_raised{false};
  run([&] {
    mvar<int> never;
    thread_id t = fork_io([&] {
      try {
        uninterruptible_mask([&] { never.take(); });
      } catch (const blocked_indefinitely&) {
        target_raised = true;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    EXPECT_NO_THROW(kill_thread(t)) << "the killer was raised instead of its target";
    EXPECT_EQ(state_of(t), thread_state::finished);
  });
  EXPECT_TRUE(target_raised.load());
  EXPECT_EQ(statistics().deadlocks_detected, 1u);
}

// Two masked threads throwing to each other: their targets are throwers,
// not raised, so they must not be left alone, or they would wait for ever
// (main, blocked too, hears of the deadlock first).
TEST_P(Deadlock, ThrowersAtEachOtherAreNotLeftBlocked) {
  run([&] {
    mvar<thread_id> other;
    mvar<int> never;
    auto body = [&] {
      thread_id peer = other.take();
      uninterruptible_mask([&] { kill_thread(peer); });
    };
    thread_id a = fork_io(body);
    thread_id b = fork_io(body);
    other.put(b);  // a kills b
    other.put(a);  // b kills a
    EXPECT_THROW(never.take(), blocked_indefinitely);
    auto ended = [](thread_id t) {
      thread_state s = state_of(t);
      return s == thread_state::finished || s == thread_state::died;
    };
    EXPECT_TRUE(green_wait_until([&] { return ended(a) && ended(b); }))
        << "two throwers were left blocked on each other";
  });
}

// A chain of throwers: A throws to B, which (uninterruptibly masked)
// throws to C, blocked for good under uninterruptible_mask.  C is raised;
// B, whose target is raised, is left alone and returns once C has taken
// its exception; A's target B will then unmask and take A's exception, so
// A is left alone too (Note [Breaking a deadlock]).  Raised, A's throw_to
// failed with blocked_indefinitely although its throw would have landed.
TEST_P(Deadlock, AChainOfThrowersEndingInARaisedThreadIsLeftAlone) {
  struct poke {};
  run([&] {
    mvar<int> never_c, never_main, a_done, b_done, c_done;
    bool c_raised = false, b_poked = false, a_raised = false;
    bool c_poked = false;
    thread_id c = fork_io([&] {
      try {
        uninterruptible_mask([&] {
          try {
            never_c.take();
          } catch (const blocked_indefinitely&) {
            c_raised = true;
          }
        });
      } catch (const poke&) {
        c_poked = true;  // B's, raised as C unmasks
      }
      c_done.put(1);
    });
    ASSERT_TRUE(green_wait_until([&] { return state_of(c) == thread_state::blocked; }));
    thread_id b = fork_io([&] {
      try {
        uninterruptible_mask([&] { throw_to(c, poke{}); });  // returns once it lands in C
      } catch (const poke&) {
        b_poked = true;  // A's, raised as B unmasks
      }
      b_done.put(1);
    });
    ASSERT_TRUE(green_wait_until([&] { return state_of(b) == thread_state::blocked; }));
    thread_id a = fork_io([&] {
      try {
        throw_to(b, poke{});
      } catch (const blocked_indefinitely&) {
        a_raised = true;
      }
      a_done.put(1);
    });
    ASSERT_TRUE(green_wait_until([&] { return state_of(a) == thread_state::blocked; }));
    EXPECT_THROW(never_main.take(), blocked_indefinitely);
    c_done.take();
    b_done.take();
    a_done.take();
    EXPECT_TRUE(c_raised);
    EXPECT_TRUE(c_poked);
    EXPECT_TRUE(b_poked) << "A's throw never landed in B";
    EXPECT_FALSE(a_raised) << "A was raised although its target was on its way to take the throw";
  });
}

// A thrower into a cycle: B and C, each uninterruptibly masked, throw to
// each other, and A throws to B.  No raised non-thrower ends their chains,
// so all three are raised (Note [Breaking a deadlock]: raising one per
// cycle can leave the rest waiting on a raised thread that never
// unmasks), and every one of them ends.
TEST_P(Deadlock, ThrowersIntoACycleAreAllRaisedAndAllEnd) {
  struct poke {};
  std::atomic<int> raised_throwers{0}, b_pokes{0}, done{0};
  run([&] {
    mvar<int> never_main;
    mvar<thread_id> a_target, c_target;
    // Pokes still pending once a thread unmasks land at these safe points.
    auto absorb = [&](std::atomic<int>* n) {
      for (int i = 0; i < 4; ++i) {
        try {
          yield();
        } catch (const poke&) {
          if (n) n->fetch_add(1);
        }
      }
    };
    thread_id a = fork_io([&] {
      thread_id b = a_target.take();
      try {
        throw_to(b, poke{});
      } catch (const blocked_indefinitely&) {
        raised_throwers.fetch_add(1);
      }
      done.fetch_add(1);
    });
    thread_id c = fork_io([&] {
      thread_id b = c_target.take();
      try {
        uninterruptible_mask([&] {
          while (state_of(b) != thread_state::blocked) yield();  // masked: nothing lands
          try {
            throw_to(b, poke{});
          } catch (const blocked_indefinitely&) {
            raised_throwers.fetch_add(1);
          }
        });
      } catch (const poke&) {
      }
      absorb(nullptr);
      done.fetch_add(1);
    });
    thread_id b = fork_io([&] {
      try {
        uninterruptible_mask([&] {
          try {
            throw_to(c, poke{});
          } catch (const blocked_indefinitely&) {
            raised_throwers.fetch_add(1);
          }
        });
      } catch (const poke&) {
        b_pokes.fetch_add(1);  // raised as B unmasks
      }
      absorb(&b_pokes);
      done.fetch_add(1);
    });
    c_target.put(b);
    ASSERT_TRUE(green_wait_until([&] {
      return state_of(b) == thread_state::blocked && state_of(c) == thread_state::blocked;
    }));
    a_target.put(b);
    ASSERT_TRUE(green_wait_until([&] { return state_of(a) == thread_state::blocked; }));
    EXPECT_THROW(never_main.take(), blocked_indefinitely);
    ASSERT_TRUE(green_wait_until([&] { return done.load() == 3; }));
  });
  EXPECT_EQ(raised_throwers.load(), 3) << "a thrower of A -> B <-> C was left alone";
  EXPECT_EQ(done.load(), 3);
}

// The cycle that raising one thrower per cycle got wrong: K cancels its
// async child C (a kill under uninterruptible_mask) while C, masked too,
// throws to K.  Raised alone, K's cancel caught blocked_indefinitely and
// waited, still masked, for C's report; C, left alone because its target
// was raised, never took anything, and main heard of a deadlock again and
// again (a reviewer's test).  Both must be raised, and the cancel returns.
TEST_P(Deadlock, ACancelInAThrowCycleWithItsChildReturns) {
  struct fire {};
  std::atomic<int> main_raised{0};
  std::atomic<bool> k_done{false};
  run([&] {
    mvar<int> done;
    mvar<int> c_masked;
    std::atomic<bool> cancelling{false};
    fork_io([&] {
      thread_id me = self();
      async<void> c([&] {
        uninterruptible_mask([&] {
          c_masked.put(1);
          while (!cancelling.load() || state_of(me) != thread_state::blocked) yield();
          throw_to(me, fire{});  // K is masked in cancel: this waits
        });
      });
      c_masked.take();
      cancelling.store(true);
      try {
        c.cancel();
      } catch (...) {
      }
      k_done = true;
      done.put(1);
    });
    for (;;) {
      try {
        done.take();
        break;
      } catch (const blocked_indefinitely&) {
        if (main_raised.fetch_add(1) + 1 >= 10) break;
      }
    }
  });
  EXPECT_TRUE(k_done.load()) << "the cancel never returned; main heard of a deadlock "
                             << main_raised.load() << " times";
  EXPECT_LE(main_raised.load(), 2);
}

// Every victim is dequeued before any is woken: a victim that ran first
// would release what another waits on.  Here a forked thread holds a mutex
// and blocks for ever; main blocks on the mutex.  Both must get
// blocked_indefinitely: woken first, the holder unwound and released the
// mutex, and main took it and returned (2 runs in 200 at -N4).
TEST_P(Deadlock, EveryVictimHearsOfItEvenIfAnotherReleasesItsLock) {
  const int kRuns = 40 / static_cast<int>(capstan_test::kScale > 1 ? 4 : 1);
  int returned = 0;
  for (int i = 0; i < kRuns; ++i) {
    // Outside run(): the forked thread's ~lock_guard may unlock mu after
    // main's lambda has unwound.
    capstan::mutex mu;
    mvar<int> held, never;
    try {
      run([&] {
        fork_io([&] {
          std::lock_guard<capstan::mutex> g(mu);
          held.put(1);
          never.take();
        });
        held.take();
        mu.lock();
        mu.unlock();
      });
      ++returned;
    } catch (const blocked_indefinitely&) {
    }
  }
  EXPECT_EQ(returned, 0) << "main took a mutex released by another victim's unwinding";
}

// DelayedPark: a run whose ticker sleeps 100 ms between judging a tick and
// parking (ticker_park_delay_us), widening the window of Note [Stopping
// the ticker], with a watchdog - an outside OS thread, hence `force` -
// that fills `never` after 5 s, so that a lost tick fails a test instead
// of hanging it.
// KnobSet sets a fault-injection knob (primitives/fault_injection.hpp)
// while it lives.
class KnobSet {
 public:
  KnobSet(std::atomic<int>& knob, int value) : knob_(knob) { knob_.store(value); }
  ~KnobSet() { knob_.store(0); }

 private:
  std::atomic<int>& knob_;
};

// forced: the test options with deadlock detection forced on.
options forced(unsigned caps) {
  options o = capstan_test::opts(caps);
  o.deadlock_detection = options::deadlock::force;
  return o;
}

// A deadlock is counted before its victims are woken: main, woken with
// blocked_indefinitely while the ticker is held up just after the
// wake-ups (a fault-injection knob, as a preempted ticker), finds it in
// statistics() at once.  Counted after the wake-ups, it read 0 here
// (EveryBlockedThreadIsWoken failed so under ThreadSanitizer at -N2).
TEST_P(Deadlock, CountedBeforeItsVictimsAreWoken) {
  KnobSet delay(capstan::rts::fault_injection::deadlock_wake_delay_us, 100'000);
  run([] {
    bool caught = false;
    try {
      mvar<int>().take();
    } catch (const blocked_indefinitely&) {
      caught = true;
    }
    EXPECT_TRUE(caught);
    EXPECT_EQ(statistics().deadlocks_detected, 1u);
  });
}

// PutGuard: an outside OS thread that fills `m` once `limit` has passed,
// so that a deadlock the runtime misses fails a test instead of hanging
// it.  It is an outside thread: tests that use it force detection.
class PutGuard {
 public:
  PutGuard(mvar<int>& m, std::chrono::milliseconds limit)
      : thread_([this, &m, limit] {
          auto until = std::chrono::steady_clock::now() + limit;
          while (!done_.load() && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(1ms);
          while (!done_.load() && !m.try_put(0)) std::this_thread::sleep_for(1ms);
        }) {}
  ~PutGuard() {
    done_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

struct DelayedPark {
  options opts;
  mvar<int> never;
  PutGuard guard{never, 5000ms};
  explicit DelayedPark(unsigned caps) : opts(capstan_test::opts(caps)) {
    opts.deadlock_detection = options::deadlock::force;
    capstan::rts::fault_injection::ticker_park_delay_us.store(100'000);
  }
  ~DelayedPark() { capstan::rts::fault_injection::ticker_park_delay_us.store(0); }
};

// The last thread wakes from a sleep, runs and blocks for good while the
// ticker is between judging its tick (a timer pending: no deadlock) and
// parking.  The ticker must not park on that stale judgement: nothing
// would wake it, and the deadlock would never be found.  The thread's
// wake-up falls inside the widened window.
TEST_P(Deadlock, FoundWhenTheLastThreadBlocksAsTheTickerParks) {
  DelayedPark dp(caps());
  bool raised = false;
  auto t0 = std::chrono::steady_clock::now();
  run(dp.opts, [&] {
    sleep_for(30ms);  // two idle ticks (a timer pending), then the delayed park
    try {
      dp.never.take();
    } catch (const blocked_indefinitely&) {
      raised = true;
    }
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(raised) << "the ticker parked on a stale judgement: the deadlock was not found";
  EXPECT_LT(ms, 2000);
  EXPECT_EQ(statistics().deadlocks_detected, raised ? 1u : 0u);
}

// The same window after a tick that broke a deadlock: main, woken by it,
// blocks for good again while the ticker is on its (delayed) way to park.
// The second deadlock is found too.
TEST_P(Deadlock, TwoDeadlocksInARowWhileTheTickerIsOnItsWayToPark) {
  DelayedPark dp(caps());
  int raised = 0;
  run(dp.opts, [&] {
    for (int i = 0; i < 2; ++i) {
      try {
        dp.never.take();
      } catch (const blocked_indefinitely&) {
        ++raised;
      }
    }
  });
  EXPECT_EQ(raised, 2) << "the second deadlock was not found";
  EXPECT_EQ(statistics().deadlocks_detected, static_cast<unsigned>(raised));
}

// The last thread blocks for good just before a tick that follows an idle
// tick: its capability may still be looking for work in idle() when the
// tick judges (not quiet: Note [Idle is not asleep]), and then goes to
// sleep without leaving idle().  The ticker must not park on that
// judgement (DeadlockTick::unsettled, Note [Stopping the ticker]), or the
// deadlock is never found.  Main blocks at offsets around the tick, timed
// from the tick that saw it asleep; a guard (an outside thread: `force`)
// ends a missed deadlock after 1 s.
TEST_P(Deadlock, FoundWhenTheLastThreadBlocksJustBeforeATick) {
  int missed = 0, trials = 0;
  for (int offset_us = -40; offset_us <= 160; offset_us += 10) {
    options opts = forced(caps());
    mvar<int> never;
    PutGuard guard(never, 1000ms);
    bool raised = false;
    run(opts, [&] {
      sleep_for(12ms);  // a tick sees every capability idle
      std::int64_t tick = capstan::rts::rt.coarse_now_ns.load(std::memory_order_relaxed);
      std::int64_t target = tick + 10'000'000 - offset_us * 1000;
      while (capstan::rts::now_ns() < target) {
      }
      try {
        never.take();
      } catch (const blocked_indefinitely&) {
        raised = true;
      }
    });
    ++trials;
    if (!raised) ++missed;
  }
  EXPECT_EQ(missed, 0) << missed << " of " << trials
                       << " deadlocks were never found: the ticker parked on a tick that saw a "
                          "capability still looking for work in idle()";
}

// A time-out that wakes nobody: main waits in an uninterruptible take
// inside timeout(100ms).  The ticker parks after two idle ticks (a timer
// is pending); the time-out is queued, not raised, and no capability
// leaves idle().  The IO thread must wake the ticker
// (ticker_judgement_changed), which then finds the deadlock (raised
// whatever the mask).  A guard ends a missed one after 2 s.
TEST_P(Deadlock, FoundWhenATimeoutEndsOnAnUninterruptibleWait) {
  options opts = forced(caps());
  mvar<int> never;
  PutGuard guard(never, 2000ms);
  bool raised = false;
  auto t0 = std::chrono::steady_clock::now();
  run(opts, [&] {
    try {
      (void)timeout(100ms, [&] { uninterruptible_mask([&] { (void)never.take(); }); });
    } catch (const blocked_indefinitely&) {
      raised = true;
    }
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(raised) << "the parked ticker never looked again after the time-out fired";
  EXPECT_LT(ms, 1500);
}

// Not while a timer is pending: a sleeper will put.
TEST_P(Deadlock, NotWhileASleeperWillWakeUs) {
  run([] {
    mvar<int> m;
    fork_io([&] {
      sleep_for(80ms);
      m.put(3);
    });
    EXPECT_EQ(m.take(), 3);
    EXPECT_EQ(statistics().deadlocks_detected, 0u);
  });
}

// Not while the IO thread is late delivering a wake-up it has taken off its
// heap (Note [Wake-ups in flight] in rts/io/wake_ups.cpp): each delivery
// waits 60 ms, six ticks, after the timer or the readiness ended the wait,
// with every capability idle.  Every kind of wait the IO thread ends:
// sleep_for, take_for, timeout() around an untimed take, a timed chan read,
// a readable pipe, and two that end as the IO thread first handles them:
// close_fd, and a wait on a regular file (always ready).
TEST_P(Deadlock, NotWhileTheIoThreadIsLateWithAWakeUp) {
  KnobSet delay(capstan::rts::fault_injection::io_wake_delay_us, 60'000);
  options o = forced(caps());
  int raised = 0, ended = 0;
  run(o, [&] {
    mvar<int> never;
    chan<int> empty;
    auto each = [&](auto&& wait) {
      try {
        wait();
        ++ended;
      } catch (const blocked_indefinitely&) {
        ++raised;
      }
    };
    each([] { sleep_for(1ms); });
    each([&] { EXPECT_FALSE(never.take_for(1ms)); });
    each([&] { EXPECT_FALSE(timeout(1ms, [&] { (void)never.take(); })); });
    each([&] { EXPECT_FALSE(empty.read_for(1ms)); });
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
    each([&] { wait_readable(fds[0]); });
    each([&] { close_fd(fds[0]); });
    ::close(fds[1]);
    int file = ::open("/proc/self/exe", O_RDONLY);
    ASSERT_GE(file, 0);
    each([&] { wait_readable(file); });
    ::close(file);
  });
  EXPECT_EQ(raised, 0) << "a thread whose wake-up was on its way heard of a deadlock";
  EXPECT_EQ(ended, 7);
  EXPECT_EQ(statistics().deadlocks_detected, 0u);
}

// Not while an idle capability holds a spark it has taken but not yet
// turned into a thread (Note [Idle is not asleep] in
// rts/exception/deadlock.cpp): the capability waits 60 ms, six ticks,
// between the two, as if preempted there, while main waits for what the
// spark will put.  At -N1 the spark comes from the capability's own pool;
// with more capabilities, an idle one may ask for it instead.
TEST_P(Deadlock, NotWhileAnIdleCapabilityIsLateStartingASpark) {
  KnobSet delay(capstan::rts::fault_injection::idle_spark_delay_us, 60'000);
  options o = forced(caps());
  int raised = 0, got = 0;
  run(o, [&] {
    for (int i = 0; i < 3; ++i) {
      mvar<int> m;
      auto s = par([&] {
        m.put(i);
        return i;
      });
      try {
        got += m.take() == i;
      } catch (const blocked_indefinitely&) {
        ++raised;
      }
      EXPECT_EQ(s.get(), i);
    }
  });
  EXPECT_EQ(raised, 0) << "main heard of a deadlock while its spark was being started";
  EXPECT_EQ(got, 3);
  EXPECT_EQ(statistics().deadlocks_detected, 0u);
}

// Not while a thread is inside a safe call that will put.
TEST_P(Deadlock, NotWhileASafeCallIsInProgress) {
  run([] {
    mvar<int> m;
    fork_io([&] {
      safe_call([] { std::this_thread::sleep_for(80ms); });
      m.put(4);
    });
    EXPECT_EQ(m.take(), 4);
    EXPECT_EQ(statistics().deadlocks_detected, 0u);
  });
}

// Not while an outside OS thread exists (it may try_put): stands down,
// and says so in the statistics.
TEST_P(Deadlock, StandsDownForAnOutsideOsThread) {
  run([] {
    mvar<int> m;
    std::thread outside([&] {
      std::this_thread::sleep_for(150ms);
      while (!m.try_put(5)) std::this_thread::yield();
    });
    EXPECT_EQ(m.take(), 5);
    outside.join();
    EXPECT_EQ(statistics().deadlocks_detected, 0u);
    EXPECT_GE(statistics().deadlock_checks_skipped, 1u);
  });
}

// An outside thread older than all of the runtime's (started before run())
// makes it stand down too: the check looks at the newest threads first
// (Note [Looking for an outside thread]) but reads on past the runtime's
// own.
TEST_P(Deadlock, StandsDownForAnOutsideThreadOlderThanTheRuntimes) {
  mvar<int> m;
  std::thread outside([&] {
    std::this_thread::sleep_for(300ms);
    while (!m.try_put(7)) std::this_thread::yield();
  });
  EXPECT_NO_THROW(run([&] {
    EXPECT_EQ(m.take(), 7);
    EXPECT_EQ(statistics().deadlocks_detected, 0u);
    EXPECT_GE(statistics().deadlock_checks_skipped, 1u);
  }));
  outside.join();  // joined whatever happened: try_put lands in m either way
}

// Stood down, the parked ticker looks again after 100 ms, then at
// doubling intervals up to 400 ms: over 1.2 s of an idle run about 5
// looks (it looked about every 120 ms, 10 in that time, waking three times
// for each; an idle run with an outside thread cost 0.3 % of a CPU).
TEST_P(Deadlock, StoodDownItLooksAgainLessAndLessOften) {
  run([] {
    mvar<int> m;
    std::thread outside([&] {
      std::this_thread::sleep_for(1200ms);
      while (!m.try_put(6)) std::this_thread::yield();
    });
    EXPECT_EQ(m.take(), 6);
    outside.join();
    auto skipped = statistics().deadlock_checks_skipped;
    EXPECT_GE(skipped, 2u);
    EXPECT_LE(skipped, 7u) << "the stood-down detector looked again too often";
  });
}

// Stood down and parked, the detector acts at its next look once the
// outside thread has exited (deadlock_recheck acts at once).
TEST_P(Deadlock, ActsAtTheNextLookAfterTheOutsideThreadExits) {
  auto t0 = std::chrono::steady_clock::now();
  run([] {
    std::thread([] { std::this_thread::sleep_for(250ms); }).detach();
    mvar<int> never;
    EXPECT_THROW(never.take(), blocked_indefinitely);
  });
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 5000) << "the detector did not act after the outside thread exited";
  EXPECT_GE(statistics().deadlock_checks_skipped, 1u);
  EXPECT_EQ(statistics().deadlocks_detected, 1u);
}

// Once the outside thread has gone, the detector acts.
TEST_P(Deadlock, ActsOnceTheOutsideThreadHasGone) {
  run([] {
    std::thread([] {}).join();
    std::thread outside([] { std::this_thread::sleep_for(50ms); });
    mvar<int> never;
    fork_io([&] { safe_call([&] { outside.join(); }); });
    EXPECT_THROW(never.take(), blocked_indefinitely);
  });
}

// force ignores outside threads; off never fires.
TEST_P(Deadlock, ForceAndOff) {
  options o = capstan_test::opts(caps());
  o.deadlock_detection = options::deadlock::force;
  std::atomic<bool> quit{false};
  std::thread outside([&] {
    while (!quit.load()) std::this_thread::sleep_for(1ms);
  });
  EXPECT_THROW(run(o, [] { mvar<int>().take(); }), blocked_indefinitely);
  quit = true;
  outside.join();
  o.deadlock_detection = options::deadlock::off;
  run(o, [] {
    mvar<int> m;
    // Nothing could wake us but the sleeper: off means nobody checks, so
    // this is just a wait.
    fork_io([&] {
      sleep_for(50ms);
      m.put(1);
    });
    EXPECT_EQ(m.take(), 1);
  });
  EXPECT_EQ(statistics().deadlocks_detected, 0u);
}

TEST(DeadlockOptions, ParsesTheFlag) {
  options o;
  o.parse_flags("--deadlock-detection=force");
  EXPECT_EQ(o.deadlock_detection, options::deadlock::force);
  o.parse_flags("--deadlock-detection=off");
  EXPECT_EQ(o.deadlock_detection, options::deadlock::off);
  EXPECT_THROW(o.parse_flags("--deadlock-detection=maybe"), options_error);
  EXPECT_THROW(o.parse_flags("--deadlock-detection"), options_error);
}

CAPSTAN_INSTANTIATE_CAPS(Deadlock);

}  // namespace
