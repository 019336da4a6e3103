// mutex_test.cpp - capstan::mutex and timed_mutex: mutual exclusion across
// capabilities, FIFO hand-off, holding a mutex across a park, waiters that
// are killed or time out, the std lock wrappers, calls from OS threads.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::green_wait_until;
using capstan_test::kScale;
using capstan_test::WithCaps;

class Mutex : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Mutex);

// Threads on every capability (some migrating, forked with fork_io) add to
// a plain counter under the mutex, yielding inside the critical section; a
// second holder would show as `inside` > 1 or a lost increment.
TEST_P(Mutex, MutualExclusionAcrossCapabilities) {
  constexpr int kThreads = 16;
  const int kIters = 2000 / kScale;
  long counter = 0;
  std::atomic<int> inside{0}, overlaps{0};
  run([&] {
    capstan::mutex m;
    capstan::wait_group wg(kThreads);
    for (int i = 0; i < kThreads; ++i) {
      auto body = [&, i] {
        for (int k = 0; k < kIters; ++k) {
          std::lock_guard<capstan::mutex> g(m);
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          long c = counter;
          if ((k + i) % 7 == 0) capstan::yield();  // park-free switch while holding it
          counter = c + 1;
          inside.fetch_sub(1);
        }
        wg.done();
      };
      if (i % 2) capstan::fork_io(body); else capstan::fork_on(static_cast<unsigned>(i), body);
    }
    wg.wait();
  });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, static_cast<long>(kThreads) * kIters);
}

// Bounded barging: once B waits, A's unlock wakes B to compete, and A's
// immediate re-locks may overtake it, but at most mutex::max_overtakes
// times: then the mutex is reserved for B, so A's next re-lock queues
// behind B.  An unboundedly barging mutex lets A take it back every time
// (at -N1 B is runnable but has not run), and `b_ran` stays unset.
TEST_P(Mutex, ARelockingLoopCannotStarveAWaiter) {
  constexpr int kBound = static_cast<int>(capstan::mutex::max_overtakes);
  run([&] {
    capstan::mutex m;
    for (int round = 0; round < 50; ++round) {
      std::atomic<bool> b_ran{false};
      m.lock();
      capstan::thread_id b = capstan::fork_io([&] {
        m.lock();
        b_ran = true;
        m.unlock();
      });
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(b) == capstan::thread_state::blocked; }));
      for (int k = 0; k < kBound + 5; ++k) {
        m.unlock();
        m.lock();
        if (k >= kBound) {
          ASSERT_TRUE(b_ran.load()) << "the re-locking thread overtook a waiter more than "
                                    << kBound << " times (round " << round << ")";
        }
      }
      m.unlock();
    }
  });
}

// The bound holds per waiter while the overtaking thread also yields
// holding the mutex (so the woken waiter runs, finds it held and queues
// again, first in line).  Three waiters queue behind A, which then
// unlocks and re-locks in a loop: each waiter may be overtaken
// max_overtakes times while first in line, so waiter i is served before A
// has re-locked (i + 1) * max_overtakes times.  With unbounded barging (at
// -N1) no waiter gets the mutex before A's loop ends.
TEST_P(Mutex, OvertakesAreBoundedAcrossRequeues) {
  constexpr int kWaiters = 3;
  constexpr long kBound = capstan::mutex::max_overtakes;
  std::vector<long> got_at(kWaiters, -1);  // A's lock count when waiter i got it; under m
  run([&] {
    capstan::mutex m;
    long a_locks = 0;  // under m
    capstan::wait_group wg(kWaiters);
    m.lock();
    for (int i = 0; i < kWaiters; ++i) {
      capstan::thread_id t = capstan::fork_io([&, i] {
        m.lock();
        got_at[static_cast<std::size_t>(i)] = a_locks;
        m.unlock();
        wg.done();
      });
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(t) == capstan::thread_state::blocked; }));
    }
    for (long k = 0; k < (kBound + 2) * (kWaiters + 1); ++k) {
      m.unlock();
      m.lock();
      ++a_locks;
      if (k % 5 == 0) capstan::yield();  // holding it: a woken waiter finds it held
    }
    m.unlock();
    wg.wait();
  });
  for (int i = 0; i < kWaiters; ++i) {
    EXPECT_GE(got_at[static_cast<std::size_t>(i)], 0) << "waiter " << i;
    EXPECT_LE(got_at[static_cast<std::size_t>(i)], (i + 1) * kBound) << "waiter " << i;
  }
}

// Waiters are served in the order they queued.
TEST_P(Mutex, WaitersGetTheMutexInFifoOrder) {
  constexpr int kWaiters = 8;
  std::vector<int> order;
  run([&] {
    capstan::mutex m;
    capstan::wait_group wg(kWaiters);
    m.lock();
    for (int i = 0; i < kWaiters; ++i) {
      capstan::thread_id t = capstan::fork_on(static_cast<unsigned>(i), [&, i] {
        m.lock();
        order.push_back(i);  // under the mutex
        m.unlock();
        wg.done();
      });
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(t) == capstan::thread_state::blocked; }));
    }
    m.unlock();
    wg.wait();
  });
  std::vector<int> want;
  for (int i = 0; i < kWaiters; ++i) want.push_back(i);
  EXPECT_EQ(order, want);
}

// The pitfall of std::mutex: a green thread holding it parks, and another
// green thread of the same capability blocks its OS thread on it - nothing
// can run the holder again.  With capstan::mutex the second locker parks;
// the capability keeps running, the holder resumes and unlocks.
TEST_P(Mutex, AHolderMayParkWhileOthersOfItsCapabilityRun) {
  int order_check = 0;
  run([&] {
    capstan::mutex m;
    capstan::mvar<int> go, done;
    capstan::fork_on(0, [&] {
      std::lock_guard<capstan::mutex> g(m);
      int v = go.take();  // parks holding the mutex
      order_check = v;
    });
    capstan::thread_id second = capstan::fork_on(0, [&] {
      std::lock_guard<capstan::mutex> g(m);  // parks, does not block capability 0
      order_check *= 10;
      done.put(1);
    });
    capstan::fork_on(0, [&] { go.put(4); });  // must get to run on capability 0
    done.take();
    // wait for the second: it unlocks m after the put, and m dies with
    // main's frame
    ASSERT_TRUE(green_wait_until([&] {
      auto s = capstan::state_of(second);
      return s == capstan::thread_state::finished || s == capstan::thread_state::died;
    }));
  });
  EXPECT_EQ(order_check, 40);
}

// A killed waiter leaves the queue exactly once: the mutex is neither lost
// (the next waiter gets it) nor given to the dead thread.
TEST_P(Mutex, AKilledWaiterLeavesAndTheNextWaiterGetsTheMutex) {
  run([&] {
    capstan::mutex m;
    std::atomic<bool> b_got{false}, b_killed{false}, c_got{false};
    m.lock();
    capstan::thread_id b = capstan::fork_io([&] {
      try {
        m.lock();
        b_got = true;
        m.unlock();
      } catch (const capstan::thread_killed&) {
        b_killed = true;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(b) == capstan::thread_state::blocked; }));
    capstan::thread_id c = capstan::fork_io([&] {
      std::lock_guard<capstan::mutex> g(m);
      c_got = true;
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(c) == capstan::thread_state::blocked; }));
    capstan::kill_thread(b);
    ASSERT_TRUE(green_wait_until([&] { return b_killed.load(); }));
    m.unlock();
    ASSERT_TRUE(green_wait_until([&] { return c_got.load(); }));
    EXPECT_FALSE(b_got.load());
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(c) == capstan::thread_state::finished; }));
    EXPECT_TRUE(m.try_lock()) << "the mutex was lost";
    m.unlock();
  });
}

// The only waiter killed: the mutex still goes free at the holder's unlock.
TEST_P(Mutex, KillingTheOnlyWaiterLeavesTheMutexUsable) {
  run([&] {
    capstan::mutex m;
    m.lock();
    capstan::thread_id b = capstan::fork_io([&] {
      try {
        m.lock();
        ADD_FAILURE() << "a killed waiter got the mutex";
      } catch (const capstan::thread_killed&) {
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(b) == capstan::thread_state::blocked; }));
    capstan::kill_thread(b);
    m.unlock();
    EXPECT_TRUE(m.try_lock());
    m.unlock();
  });
}

struct boom {
  int v;
};

// Blocking in lock() stays interruptible under mask (throw_to ends the
// wait, the mutex is not taken), but not under uninterruptible_mask: there
// the thread gets the mutex first and meets the exception when the mask
// ends.
TEST_P(Mutex, MaskedLockIsInterruptibleUninterruptibleIsNot) {
  run([&] {
    capstan::mutex m;
    for (bool uninterruptible : {false, true}) {
      std::atomic<bool> got{false}, caught{false};
      m.lock();
      capstan::thread_id t = capstan::fork_io([&, uninterruptible] {
        try {
          auto body = [&] {
            std::lock_guard<capstan::mutex> g(m);
            got = true;
          };
          if (uninterruptible) capstan::uninterruptible_mask(body); else capstan::mask(body);
        } catch (const boom&) {
          caught = true;
        }
      });
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(t) == capstan::thread_state::blocked; }));
      std::atomic<bool> thrown{false};
      capstan::fork_io([&, t] {
        capstan::throw_to(t, boom{1});  // returns once raised
        thrown = true;
      });
      for (int k = 0; k < 50; ++k) capstan::yield();
      if (!uninterruptible) {
        ASSERT_TRUE(green_wait_until([&] { return caught.load(); }));
        EXPECT_FALSE(got.load());
        m.unlock();
      } else {
        EXPECT_EQ(capstan::state_of(t), capstan::thread_state::blocked) << "interrupted under uninterruptible_mask";
        EXPECT_FALSE(thrown.load());
        m.unlock();
        ASSERT_TRUE(green_wait_until([&] { return caught.load(); }));
        EXPECT_TRUE(got.load());
      }
      ASSERT_TRUE(green_wait_until([&] { return thrown.load(); }));
      EXPECT_TRUE(m.try_lock()) << "the mutex was lost";
      m.unlock();
    }
  });
}

// std::scoped_lock over two capstan mutexes (std::lock's try_lock dance),
// std::unique_lock with try_to_lock.
TEST_P(Mutex, StdLockWrappersWork) {
  long a = 0, b = 0;
  run([&] {
    capstan::mutex m1, m2;
    capstan::wait_group wg(8);
    for (int i = 0; i < 8; ++i) {
      capstan::fork_io([&, i] {
        for (int k = 0; k < 500 / kScale; ++k) {
          if (i % 2) {
            std::scoped_lock g(m1, m2);
            ++a;
            ++b;
          } else {
            std::scoped_lock g(m2, m1);
            ++a;
            ++b;
          }
          if (k % 5 == 0) capstan::yield();
        }
        wg.done();
      });
    }
    wg.wait();
    std::unique_lock<capstan::mutex> held(m1);
    std::thread other([&] {
      std::unique_lock<capstan::mutex> t(m1, std::try_to_lock);
      EXPECT_FALSE(t.owns_lock());
    });
    other.join();
  });
  EXPECT_EQ(a, 8 * (500 / kScale));
  EXPECT_EQ(b, a);
}

// try_lock and unlock work from a plain OS thread; unlock there hands the
// mutex to a parked green waiter.
TEST_P(Mutex, AnOsThreadMayTryLockAndUnlock) {
  run([&] {
    capstan::mutex m;
    std::atomic<bool> locked{false}, release{false};
    std::thread os([&] {
      while (!m.try_lock()) std::this_thread::yield();
      locked = true;
      while (!release.load()) std::this_thread::yield();
      m.unlock();
    });
    ASSERT_TRUE(green_wait_until([&] { return locked.load(); }));
    release = true;
    m.lock();  // parks until the OS thread unlocks
    m.unlock();
    os.join();
  });
}

TEST_P(Mutex, TimedLockTimesOutAndLeavesTheMutexUsable) {
  run([&] {
    capstan::timed_mutex m;
    m.lock();
    bool got = true;
    capstan::mvar<int> done;
    capstan::fork_io([&] {
      got = m.try_lock_for(std::chrono::milliseconds(2));
      bool got2 = m.try_lock_until(std::chrono::steady_clock::now() - std::chrono::seconds(1));
      EXPECT_FALSE(got2);
      done.put(1);
    });
    done.take();
    EXPECT_FALSE(got);
    m.unlock();
    EXPECT_TRUE(m.try_lock_for(std::chrono::milliseconds(1)));
    m.unlock();
  });
}

// An unlock racing with a waiter's time-out: exactly one of them gets the
// waiter.  If the waiter timed out but was also handed the mutex, nobody
// would own it and the final lock would hang; if it got the mutex but
// returned false, it would never unlock it.
TEST_P(Mutex, AnUnlockRacingATimeOutWakesOnce) {
  int got_count = 0, timed_out = 0;
  run([&] {
    capstan::timed_mutex m;
    std::mt19937 rng(42);
    for (int round = 0; round < 200 / kScale; ++round) {
      m.lock();
      capstan::mvar<bool> result;
      capstan::fork_io([&] {
        bool got = m.try_lock_for(std::chrono::microseconds(300));
        if (got) m.unlock();
        result.put(got);
      });
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 600);
      while (std::chrono::steady_clock::now() < until) capstan::yield();
      m.unlock();
      (result.take() ? got_count : timed_out)++;
      std::unique_lock<capstan::timed_mutex> g(m);  // never lost
    }
  });
  EXPECT_EQ(got_count + timed_out, 200 / kScale);
}

TEST(MutexOutsideRun, LockFromAPlainOsThreadIsAClearError) {
  capstan::mutex m;
  try {
    m.lock();
    FAIL() << "lock outside run returned";
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("capstan::mutex::lock"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(m.try_lock());  // the non-blocking calls work anywhere
  m.unlock();
  capstan::timed_mutex tm;
  EXPECT_THROW(tm.try_lock_for(std::chrono::milliseconds(1)), capstan::usage_error);
}

}  // namespace
