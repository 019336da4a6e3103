// interrupted_waits_test.cpp - every synchronisation primitive's wait
// ended by something other than its own operation: a throw_to or a
// timeout() (also during a condition variable's re-lock), the primitive
// destroyed under its waiters, deadlock detection, and shutdown.  After
// each, the primitive is usable, no lock or unit went to the waiter that
// left, and a condition variable's waiter holds its mutex again.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "../stress/stress.hpp"
#include "capstan_test.hpp"

namespace {

using namespace std::chrono_literals;
using capstan_test::green_wait_until;
using capstan_test::WithCaps;

class InterruptedWaits : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(InterruptedWaits);

capstan::options force_opts(unsigned caps) {
  capstan::options o = capstan_test::opts(caps);
  o.deadlock_detection = capstan::options::deadlock::force;
  return o;
}

bool blocked(capstan::thread_id t) {
  return capstan::state_of(t) == capstan::thread_state::blocked;
}
bool finished(capstan::thread_id t) {
  auto s = capstan::state_of(t);
  return s == capstan::thread_state::finished || s == capstan::thread_state::died;
}

struct boom {};

// A timed cv wait times out, then blocks re-taking the mutex (held by
// main); a throw_to there: the exception must leave wait with lk held.
TEST_P(InterruptedWaits, ThrowDuringRelockAfterTimeoutLeavesHoldingTheMutex) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    std::atomic<int> phase{0};
    std::atomic<bool> owns{false}, caught{false}, held_checked{false};
    capstan::thread_id w = capstan::fork_io([&] {
      std::unique_lock<capstan::mutex> lk(m);
      phase = 1;
      try {
        cv.wait_for(lk, 30ms);
        ADD_FAILURE() << "wait_for returned";
      } catch (const boom&) {
        caught = true;
        owns = lk.owns_lock();
        phase = 2;
        // hold it until main has checked
        green_wait_until([&] { return held_checked.load(); });
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return phase.load() == 1 && blocked(w); }));
    m.lock();                  // waiter released it
    capstan::sleep_for(80ms);  // time-out passes; w now blocks relocking
    ASSERT_TRUE(green_wait_until([&] { return blocked(w); }));
    capstan::throw_to(w, boom{});
    m.unlock();
    ASSERT_TRUE(green_wait_until([&] { return phase.load() == 2; }));
    EXPECT_TRUE(caught.load());
    EXPECT_TRUE(owns.load());
    EXPECT_FALSE(m.try_lock()) << "the waiter's exception left wait without the mutex";
    held_checked = true;
    ASSERT_TRUE(green_wait_until([&] { return finished(w); }));
    EXPECT_TRUE(m.try_lock());
    m.unlock();
  });
}

// timeout() around cv.wait, firing while the relock blocks after a notify:
// the notify must be passed on, and lk owned after timeout returns.
TEST_P(InterruptedWaits, TimeoutAroundCvWaitPassesNotifyOnAndHoldsLock) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    std::atomic<int> got_b{0};
    std::atomic<bool> a_owns{false}, a_done{false}, a_result{true};
    std::atomic<int> queued{0};
    capstan::thread_id a = capstan::fork_io([&] {
      std::unique_lock<capstan::mutex> lk(m);
      ++queued;
      bool r = capstan::timeout(60ms, [&] { cv.wait(lk); });
      a_result = r;
      a_owns = lk.owns_lock();
      a_done = true;
    });
    ASSERT_TRUE(green_wait_until([&] { return queued.load() == 1 && blocked(a); }));
    capstan::thread_id b = capstan::fork_io([&] {
      std::unique_lock<capstan::mutex> lk(m);
      ++queued;
      cv.wait(lk);
      ++got_b;
    });
    ASSERT_TRUE(green_wait_until([&] { return queued.load() == 2 && blocked(b); }));
    m.lock();
    cv.notify_one();            // a is served; its relock blocks on m
    capstan::sleep_for(150ms);  // a's timeout fires in the relock
    m.unlock();
    ASSERT_TRUE(green_wait_until([&] { return a_done.load(); }));
    EXPECT_TRUE(a_owns.load());
    ASSERT_TRUE(green_wait_until([&] { return finished(b); })) << "notify lost";
    EXPECT_EQ(got_b.load(), 1);
    (void)a_result;
  });
}

// timeout() around every blocking call; afterwards each primitive works and
// no unit/count is given to the timed-out waiter.
TEST_P(InterruptedWaits, TimeoutAroundEachPrimitiveLeavesItUsable) {
  run([&] {
    {
      capstan::mutex m;
      m.lock();
      EXPECT_FALSE(capstan::timeout(10ms, [&] { m.lock(); }));
      m.unlock();
      EXPECT_TRUE(m.try_lock());
      m.unlock();
    }
    {
      capstan::timed_mutex m;
      m.lock();
      EXPECT_FALSE(capstan::timeout(10ms, [&] { (void)m.try_lock_for(10s); }));
      m.unlock();
      EXPECT_TRUE(m.try_lock());
      m.unlock();
    }
    {
      capstan::shared_mutex m;
      m.lock();
      EXPECT_FALSE(capstan::timeout(10ms, [&] { m.lock_shared(); }));
      EXPECT_FALSE(capstan::timeout(10ms, [&] { m.lock(); }));
      EXPECT_FALSE(capstan::timeout(10ms, [&] { (void)m.try_lock_shared_for(10s); }));
      m.unlock();
      EXPECT_TRUE(m.try_lock());
      m.unlock();
      EXPECT_TRUE(m.try_lock_shared());
      m.lock_shared();
      EXPECT_FALSE(capstan::timeout(10ms, [&] { m.lock(); }));
      EXPECT_TRUE(m.try_lock_shared()) << "a timed-out writer still blocks readers";
      m.unlock_shared();
      m.unlock_shared();
      m.unlock_shared();
      EXPECT_TRUE(m.try_lock());
      m.unlock();
    }
    {
      capstan::counting_semaphore<4> s(0);
      EXPECT_FALSE(capstan::timeout(10ms, [&] { s.acquire(); }));
      EXPECT_FALSE(capstan::timeout(10ms, [&] { (void)s.try_acquire_for(10s); }));
      s.release();
      EXPECT_TRUE(s.try_acquire());
      EXPECT_FALSE(s.try_acquire());
    }
    {
      capstan::latch l(1);
      EXPECT_FALSE(capstan::timeout(10ms, [&] { l.wait(); }));
      l.count_down();
      EXPECT_TRUE(l.try_wait());
      l.wait();
    }
    {
      capstan::wait_group wg(1);
      EXPECT_FALSE(capstan::timeout(10ms, [&] { wg.wait(); }));
      wg.done();
      wg.wait();
    }
    {
      capstan::promise<int> p;
      capstan::future<int> f = p.get_future();
      EXPECT_FALSE(capstan::timeout(10ms, [&] { (void)f.get(); }));
      EXPECT_TRUE(f.valid());
      p.set_value(7);
      EXPECT_EQ(f.get(), 7);
    }
    {
      capstan::barrier<> b(2);
      EXPECT_FALSE(capstan::timeout(10ms, [&] { b.arrive_and_wait(); }));
      // our arrival counted; one more completes the phase
      auto t = b.arrive();
      b.wait(std::move(t));
    }
    {
      capstan::mutex m;
      capstan::condition_variable cv;
      std::unique_lock<capstan::mutex> lk(m);
      EXPECT_FALSE(capstan::timeout(10ms, [&] { cv.wait(lk); }));
      EXPECT_TRUE(lk.owns_lock());
      EXPECT_EQ(cv.wait_for(lk, 1ms), std::cv_status::timeout);
    }
  });
}

// Each primitive destroyed while a thread waits on it: the waiter gets
// blocked_indefinitely.
TEST_P(InterruptedWaits, DestroyedWhileWaitingRaisesBlockedIndefinitely) {
  run([&] {
    std::atomic<int> raised{0};
    auto expect_raise = [&](auto make_wait, auto destroy) {
      int before = raised.load();
      std::atomic<bool> started{false};
      capstan::thread_id t = capstan::fork_io([&] {
        try {
          started = true;
          make_wait();
          ADD_FAILURE() << "wait returned";
        } catch (const capstan::blocked_indefinitely&) {
          ++raised;
        }
      });
      EXPECT_TRUE(green_wait_until([&] { return started.load() && blocked(t); }));
      destroy();
      EXPECT_TRUE(green_wait_until([&] { return finished(t); }));
      EXPECT_EQ(raised.load(), before + 1);
    };
    {
      auto s = std::make_unique<capstan::counting_semaphore<>>(0);
      expect_raise([&] { s->acquire(); }, [&] { s.reset(); });
    }
    {
      auto s = std::make_unique<capstan::counting_semaphore<>>(0);
      expect_raise([&] { (void)s->try_acquire_for(10s); }, [&] { s.reset(); });
    }
    {
      auto l = std::make_unique<capstan::latch>(1);
      expect_raise([&] { l->wait(); }, [&] { l.reset(); });
    }
    {
      auto b = std::make_unique<capstan::barrier<>>(2);
      expect_raise([&] { b->arrive_and_wait(); }, [&] { b.reset(); });
    }
    {
      auto w = std::make_unique<capstan::wait_group>(1);
      expect_raise([&] { w->wait(); }, [&] { w.reset(); });
    }
    {
      capstan::mutex m;
      auto cv = std::make_unique<capstan::condition_variable>();
      std::atomic<bool> owns{false};
      expect_raise(
          [&] {
            std::unique_lock<capstan::mutex> lk(m);
            try {
              cv->wait(lk);
            } catch (...) {
              owns = lk.owns_lock();
              throw;
            }
          },
          [&] { cv.reset(); });
      EXPECT_TRUE(owns.load());
      EXPECT_TRUE(m.try_lock());
      m.unlock();
    }
    {
      capstan::mutex m;
      auto cv = std::make_unique<capstan::condition_variable>();
      expect_raise(
          [&] {
            std::unique_lock<capstan::mutex> lk(m);
            (void)cv->wait_for(lk, 10s);
          },
          [&] { cv.reset(); });
      EXPECT_TRUE(m.try_lock());
      m.unlock();
    }
    {
      auto m = std::make_unique<capstan::timed_mutex>();
      m->lock();
      expect_raise([&] { (void)m->try_lock_for(10s); }, [&] { m.reset(); });
    }
    {
      auto m = std::make_unique<capstan::mutex>();
      m->lock();
      expect_raise([&] { m->lock(); }, [&] { m.reset(); });
    }
    {
      auto m = std::make_unique<capstan::shared_mutex>();
      m->lock();
      expect_raise([&] { m->lock_shared(); }, [&] { m.reset(); });
    }
    {
      auto m = std::make_unique<capstan::shared_mutex>();
      m->lock();
      expect_raise([&] { (void)m->try_lock_for(10s); }, [&] { m.reset(); });
    }
  });
}

// Deadlock on a mutex cycle: both get blocked_indefinitely; nothing hangs.
TEST_P(InterruptedWaits, DeadlockOnMutexCycleIsDetected) {
  std::atomic<int> raised{0};
  capstan::mutex a, b;
  capstan::latch both(2);
  capstan::latch never(1);
  EXPECT_THROW(run(force_opts(caps()),
                   [&] {
                     // Each takes one, then (once both hold theirs) the other.
                     auto lock_both = [&](capstan::mutex& first, capstan::mutex& second) {
                       capstan::fork_io([&, f = &first, s = &second] {
                         try {
                           std::lock_guard<capstan::mutex> g(*f);
                           both.arrive_and_wait();
                           std::lock_guard<capstan::mutex> h(*s);
                         } catch (const capstan::blocked_indefinitely&) {
                           ++raised;
                         }
                       });
                     };
                     lock_both(a, b);
                     lock_both(b, a);
                     never.wait();
                   }),
               capstan::blocked_indefinitely);
  EXPECT_EQ(raised.load(), 2);
}

// Deadlock: a cv waiter whose mutex is held by main, main stuck on a
// latch.  Both raised; the waiter re-takes the mutex once main lets go.
TEST_P(InterruptedWaits, DeadlockWithCvWaiterAndHolder) {
  stress::Watchdog wd(std::chrono::seconds(20), "DeadlockWithCvWaiterAndHolder");
  std::atomic<int> raised{0};
  std::atomic<bool> owns{false};
  capstan::mutex m;
  capstan::condition_variable cv;
  capstan::latch never(1);
  EXPECT_THROW(run(force_opts(caps()),
                   [&] {
                     std::atomic<bool> waiting{false};
                     capstan::thread_id w = capstan::fork_io([&] {
                       std::unique_lock<capstan::mutex> lk(m);
                       waiting = true;
                       try {
                         cv.wait(lk);
                       } catch (const capstan::blocked_indefinitely&) {
                         owns = lk.owns_lock();
                         ++raised;
                       }
                     });
                     green_wait_until([&] { return waiting.load() && blocked(w); });
                     std::lock_guard<capstan::mutex> g(m);
                     never.wait();
                   }),
               capstan::blocked_indefinitely);
  EXPECT_EQ(raised.load(), 1);
  EXPECT_TRUE(owns.load());
}

// Deadlock on each primitive at once.
TEST_P(InterruptedWaits, DeadlockOnEveryPrimitive) {
  std::atomic<int> raised{0};
  constexpr int kWaiters = 10;
  capstan::mutex m;
  capstan::timed_mutex tm;
  capstan::shared_mutex sm;
  capstan::condition_variable cv;
  capstan::counting_semaphore<> sem(0);
  capstan::latch l(1);
  capstan::barrier<> bar(3);
  capstan::wait_group wg(1);
  capstan::promise<int> p;
  auto f = p.get_future();
  capstan::latch started(kWaiters);
  EXPECT_THROW(run(force_opts(caps()),
                   [&] {
                     m.lock();
                     tm.lock();
                     sm.lock();
                     auto spawn = [&](auto fn) {
                       capstan::fork_io([&, fn] {
                         try {
                           started.count_down();
                           fn();
                         } catch (const capstan::blocked_indefinitely&) {
                           ++raised;
                         }
                       });
                     };
                     spawn([&] { m.lock(); });
                     spawn([&] { tm.lock(); });
                     spawn([&] { sm.lock_shared(); });
                     spawn([&] { sm.lock(); });
                     spawn([&] {
                       capstan::mutex m2;
                       std::unique_lock<capstan::mutex> lk(m2);
                       cv.wait(lk);
                     });
                     spawn([&] { sem.acquire(); });
                     spawn([&] { l.wait(); });
                     spawn([&] { bar.arrive_and_wait(); });
                     spawn([&] { wg.wait(); });
                     spawn([&] { (void)f.get(); });
                     started.wait();
                     try {
                       l.wait();
                     } catch (const capstan::blocked_indefinitely&) {
                       m.unlock();
                       tm.unlock();
                       sm.unlock();
                       throw;
                     }
                   }),
               capstan::blocked_indefinitely);
  EXPECT_EQ(raised.load(), kWaiters);
}

// Shutdown while threads wait on everything, including a cv waiter whose
// mutex is held by a thread blocked on a semaphore: every one of them is
// killed (its handler sees thread_killed), none is abandoned.
TEST_P(InterruptedWaits, ShutdownWhileWaitingOnEverything) {
  // The primitives outlive the run: the threads blocked on them are killed
  // as it ends.
  struct primitives {
    capstan::mutex m, cvm;
    capstan::timed_mutex tm;
    capstan::shared_mutex sm;
    capstan::condition_variable cv;
    capstan::counting_semaphore<> sem{0};
    capstan::latch l{1};
    capstan::barrier<> bar{3};
    capstan::wait_group wg{1};
    capstan::promise<int> p;
    capstan::future<int> f = p.get_future();
  };
  auto prims = std::make_unique<primitives>();
  primitives& x = *prims;
  std::atomic<int> killed{0};
  int spawned = 0;
  run([&] {
    std::vector<capstan::thread_id> ids;
    auto spawn = [&](auto fn) {
      ++spawned;
      ids.push_back(capstan::fork_io([&killed, fn] {
        try {
          fn();
        } catch (const capstan::thread_killed&) {
          ++killed;
          throw;
        }
      }));
    };
    std::atomic<bool> holder_in{false};
    spawn([&] {
      std::lock_guard<capstan::mutex> g(x.cvm);
      holder_in = true;
      x.sem.acquire();
    });
    ASSERT_TRUE(green_wait_until([&] { return holder_in.load(); }));
    spawn([&] {
      std::unique_lock<capstan::mutex> lk(x.cvm);
      x.cv.wait(lk);
    });
    spawn([&] {
      x.m.lock();
      x.m.lock();
    });
    spawn([&] {
      x.tm.lock();
      (void)x.tm.try_lock_for(3600s);
    });
    std::atomic<bool> sm_held{false};
    spawn([&] {
      x.sm.lock();
      sm_held = true;
      capstan::sleep_for(3600s);
    });
    // Before the shared locker: at -N2 and up it could run first on
    // another capability, take the lock shared and finish, never blocked
    // (seen under ThreadSanitizer at -N4).
    ASSERT_TRUE(green_wait_until([&] { return sm_held.load(); }));
    spawn([&] { x.sm.lock_shared(); });
    spawn([&] { x.sm.lock(); });
    spawn([&] { x.sem.acquire(); });
    spawn([&] { x.l.wait(); });
    spawn([&] { x.bar.arrive_and_wait(); });
    spawn([&] { x.wg.wait(); });
    spawn([&] { (void)x.f.get(); });
    ASSERT_TRUE(green_wait_until([&] {
      for (capstan::thread_id t : ids)
        if (!blocked(t)) return false;
      return true;
    }));
  });
  EXPECT_EQ(killed.load(), spawned);
  EXPECT_EQ(capstan::statistics().threads_abandoned, 0u);
  EXPECT_GE(capstan::statistics().threads_killed, static_cast<std::uint64_t>(spawned));
  // Locks the killed threads held are still held: give them back before
  // the primitives go.
  x.m.unlock();
  x.tm.unlock();
  x.sm.unlock();
}

}  // namespace
