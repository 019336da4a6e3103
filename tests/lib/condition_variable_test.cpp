// condition_variable_test.cpp - capstan::condition_variable and
// condition_variable_any: no lost notify, no spurious wake-ups, FIFO single
// wake-ups, timed waits and a notify racing a time-out, waits ended by
// kill_thread, OS-thread callers; condition_variable_any with capstan::mutex
// itself and with exclusive and shared locks of a shared_mutex.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "capstan_test.hpp"

namespace {

using capstan_test::green_wait_until;
using capstan_test::kScale;
using capstan_test::WithCaps;

class CondVar : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(CondVar);

// ended: t has finished, normally or killed (its destructors have run).
bool ended(capstan::thread_id t) {
  auto s = capstan::state_of(t);
  return s == capstan::thread_state::finished || s == capstan::thread_state::died;
}

// Ping-pong through a flag: each side sets it under the mutex and notifies
// *after* unlocking, sometimes yielding first, so notifies land at every
// point of the other side's predicate-check/park window.  A lost notify
// leaves both sides waiting: deadlock detection would end the run with
// blocked_indefinitely.
TEST_P(CondVar, NoNotifyIsLostBetweenThePredicateCheckAndThePark) {
  const int kRounds = 20000 / kScale;
  int turn_count = 0;
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    int turn = 0;
    capstan::wait_group wg(2);
    for (int me = 0; me < 2; ++me) {
      capstan::fork_io([&, me] {
        std::minstd_rand rng(static_cast<unsigned>(me + 1));
        for (int r = 0; r < kRounds; ++r) {
          {
            std::unique_lock<capstan::mutex> lk(m);
            cv.wait(lk, [&] { return turn == me; });
            turn = 1 - me;
            ++turn_count;
          }
          if (rng() % 3 == 0) capstan::yield();
          cv.notify_one();
        }
        wg.done();
      });
    }
    wg.wait();
  });
  EXPECT_EQ(turn_count, 2 * kRounds);
}

// No spurious wake-ups: a waiter counted in `waiting` (under the mutex) is
// queued on the condition variable; the notifier hands out one ticket per
// notify_one it sends to a counted waiter, and every wake-up of a plain
// wait() (no predicate) must consume a ticket.
TEST_P(CondVar, EveryWakeUpIsANotify) {
  constexpr int kWaiters = 6;
  const int kNotifies = 6000 / kScale;
  int spurious = 0;
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    int waiting = 0, tickets = 0, woken = 0, last_waiting = 0;
    bool stop = false;
    capstan::wait_group wg(kWaiters);
    for (int i = 0; i < kWaiters; ++i) {
      capstan::fork_io([&] {
        {
          std::unique_lock<capstan::mutex> lk(m);
          while (!stop) {
            ++waiting;
            cv.wait(lk);
            if (tickets == 0) ++spurious; else --tickets;
            ++woken;
          }
        }
        wg.done();  // after the unlock: once all are done, m goes out of scope
      });
    }
    for (int sent = 0; sent < kNotifies;) {
      {
        std::lock_guard<capstan::mutex> g(m);
        if (waiting == 0) goto next;
        --waiting;
        ++tickets;
        ++sent;
      }
      cv.notify_one();
    next:
      capstan::yield();
    }
    {
      std::unique_lock<capstan::mutex> lk(m);
      stop = true;
      tickets += waiting;
      last_waiting = waiting;
      waiting = 0;
    }
    cv.notify_all();
    wg.wait();
    EXPECT_EQ(tickets, 0);
    EXPECT_EQ(woken, kNotifies + last_waiting);
  });
  EXPECT_EQ(spurious, 0);
}

// notify_one wakes exactly the oldest waiter.
TEST_P(CondVar, NotifyOneWakesTheOldestWaiterOnly) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    std::atomic<int> woke{-1};
    capstan::thread_id t[3];
    for (int i = 0; i < 3; ++i) {
      t[i] = capstan::fork_io([&, i] {
        std::unique_lock<capstan::mutex> lk(m);
        cv.wait(lk);
        woke = i;
      });
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(t[i]) == capstan::thread_state::blocked; }));
    }
    for (int i = 0; i < 3; ++i) {
      cv.notify_one();
      ASSERT_TRUE(green_wait_until([&] { return woke.load() == i; }));
      for (int j = i + 1; j < 3; ++j) EXPECT_EQ(capstan::state_of(t[j]), capstan::thread_state::blocked);
    }
    // wait for the waiters: each unlocks m after setting woke, and m dies
    // with main's frame
    ASSERT_TRUE(green_wait_until([&] { return ended(t[0]) && ended(t[1]) && ended(t[2]); }));
  });
}

TEST_P(CondVar, TimedWaitsTimeOutHoldingTheMutex) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    std::unique_lock<capstan::mutex> lk(m);
    EXPECT_EQ(cv.wait_for(lk, std::chrono::milliseconds(2)), std::cv_status::timeout);
    EXPECT_TRUE(lk.owns_lock());
    EXPECT_FALSE(m.try_lock());
    EXPECT_EQ(cv.wait_until(lk, std::chrono::steady_clock::now() - std::chrono::seconds(1)),
              std::cv_status::timeout);
    EXPECT_FALSE(cv.wait_for(lk, std::chrono::milliseconds(1), [] { return false; }));
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::hours(1), [] { return true; }));
  });
}

// A notify_one racing with W's time-out wakes exactly one thread: W (which
// returns no_timeout) or, if the timer took W off the queue first, the
// waiter V queued behind it - never both, never neither.  CV is
// condition_variable or condition_variable_any; lock(m) makes the lock
// each thread waits with.
template <class CV, class M, class MakeLock>
void notify_racing_a_time_out(int rounds, MakeLock lock) {
  int w_notified = 0, v_notified = 0;
  M m;
  CV cv;
  std::minstd_rand rng(7);
  for (int round = 0; round < rounds; ++round) {
    std::atomic<bool> v_woke{false};
    capstan::mvar<std::cv_status> w_result;
    capstan::thread_id w = capstan::fork_io([&] {
      auto lk = lock(m);
      w_result.put(cv.wait_for(lk, std::chrono::microseconds(200)));
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(w) != capstan::thread_state::running; }));
    std::atomic<bool> v_in{false};
    capstan::thread_id v = capstan::fork_io([&] {
      auto lk = lock(m);
      v_in = true;  // holds m until the wait queues it
      cv.wait(lk);
      v_woke = true;
    });
    // Queued on the cv, not blocked in lock(m) behind W re-taking it after
    // its time-out (a notify would then find the queue empty).
    ASSERT_TRUE(green_wait_until([&] {
      return v_in.load() && capstan::state_of(v) == capstan::thread_state::blocked;
    }));
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 400);
    while (std::chrono::steady_clock::now() < until) capstan::yield();
    cv.notify_one();
    std::cv_status s = w_result.take();
    if (s == std::cv_status::no_timeout) {
      ++w_notified;
      EXPECT_EQ(capstan::state_of(v), capstan::thread_state::blocked) << "one notify woke two";
      cv.notify_one();
    } else {
      ++v_notified;
    }
    ASSERT_TRUE(green_wait_until([&] { return v_woke.load(); })) << "the notify woke nobody";
    // wait for W and V: each unlocks m after its last word, and m dies with
    // this frame (W's w_result with the round)
    ASSERT_TRUE(green_wait_until([&] { return ended(w) && ended(v); }));
  }
  EXPECT_EQ(w_notified + v_notified, rounds);
}

TEST_P(CondVar, ANotifyRacingATimeOutWakesExactlyOnce) {
  run([&] {
    notify_racing_a_time_out<capstan::condition_variable, capstan::mutex>(
        300 / kScale, [](capstan::mutex& m) { return std::unique_lock<capstan::mutex>(m); });
  });
}

// kill_thread ends a wait; the waiter holds the mutex again while the
// exception unwinds (its unique_lock owns it), and the next notify goes to
// the next waiter.
TEST_P(CondVar, AKilledWaiterUnwindsHoldingTheMutex) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    std::atomic<bool> owned_in_catch{false}, other_woke{false};
    capstan::thread_id a = capstan::fork_io([&] {
      std::unique_lock<capstan::mutex> lk(m);
      try {
        cv.wait(lk);
      } catch (const capstan::thread_killed&) {
        owned_in_catch = lk.owns_lock();
        throw;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(a) == capstan::thread_state::blocked; }));
    capstan::thread_id b = capstan::fork_io([&] {
      std::unique_lock<capstan::mutex> lk(m);
      cv.wait(lk);
      other_woke = true;
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(b) == capstan::thread_state::blocked; }));
    {
      std::lock_guard<capstan::mutex> g(m);  // a's re-lock must wait for us
      capstan::kill_thread(a);
    }
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(a) != capstan::thread_state::blocked &&
                                              capstan::state_of(a) != capstan::thread_state::running; }));
    EXPECT_TRUE(owned_in_catch.load());
    cv.notify_one();
    ASSERT_TRUE(green_wait_until([&] { return other_woke.load(); }));
    // wait for b: it unlocks m after setting other_woke, and m dies with
    // main's frame (and try_lock would fail while b holds it)
    ASSERT_TRUE(green_wait_until([&] { return ended(b); }));
    EXPECT_TRUE(m.try_lock());
    m.unlock();
  });
}

// Note [No lost notify]: a waiter served by notify_one and killed before it
// runs (the kill arrives just after the notify) passes the notification
// on: the other waiter takes the item.  The kill was raised in the killed
// waiter with the mutex held, and the notification died with it: the
// second consumer slept for ever with the item queued.
TEST_P(CondVar, ANotifiedWaiterKilledBeforeItRunsPassesTheNotifyOn) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    int items = 0;
    capstan::mvar<int> consumed_by;
    std::atomic<int> killed_in_wait{0};
    auto consumer = [&](int who) {
      std::unique_lock<capstan::mutex> lk(m);
      try {
        cv.wait(lk, [&] { return items > 0; });
      } catch (const capstan::thread_killed&) {
        EXPECT_TRUE(lk.owns_lock());
        killed_in_wait.fetch_add(1);
        throw;
      }
      --items;
      lk.unlock();
      consumed_by.put(who);
    };
    capstan::thread_id c1 = capstan::fork_io([&] { consumer(1); });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(c1) == capstan::thread_state::blocked; }));
    capstan::thread_id c2 = capstan::fork_io([&] { consumer(2); });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(c2) == capstan::thread_state::blocked; }));
    {
      std::lock_guard<capstan::mutex> g(m);
      ++items;
    }
    cv.notify_one();         // serves c1, the oldest
    capstan::kill_thread(c1);  // before c1 has run
    auto who = consumed_by.take_for(std::chrono::seconds(5));
    ASSERT_TRUE(who.has_value()) << "the notify was lost with the killed waiter";
    // c1 either took the item before the kill could land (it passes a safe
    // point only after) or was killed in its wait and passed the notify to c2.
    if (*who == 2) {
      EXPECT_EQ(killed_in_wait.load(), 1);
    }
    EXPECT_EQ(items, 0);
    capstan::kill_thread(c2);
    // wait for c1 and c2: a killed waiter re-takes and unlocks m as it
    // unwinds, and m dies with main's frame
    ASSERT_TRUE(green_wait_until([&] { return ended(c1) && ended(c2); }));
  });
}

// Note [Relocking after a wait]: a thread holding the mutex kills a waiter
// that has been notified and is re-taking the mutex.  The re-take was
// uninterruptible, and kill_thread returns only once the kill has landed:
// each waited for the other for ever.  Now the kill lands; the waiter
// takes the mutex as it unwinds, once the killer lets go.
TEST_P(CondVar, KillingANotifiedWaiterWhileHoldingTheMutexReturns) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    bool stop = false;
    std::atomic<bool> owned_in_catch{false};
    capstan::mvar<int> ended;
    capstan::thread_id w = capstan::fork_io([&] {
      try {
        std::unique_lock<capstan::mutex> lk(m);
        try {
          while (!stop) cv.wait(lk);
        } catch (const capstan::thread_killed&) {
          owned_in_catch = lk.owns_lock();
          throw;
        }
      } catch (const capstan::thread_killed&) {
        ended.put(1);
        throw;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(w) == capstan::thread_state::blocked; }));
    {
      std::lock_guard<capstan::mutex> g(m);
      stop = true;
      cv.notify_all();
      capstan::sleep_for(std::chrono::milliseconds(2));  // w runs and blocks on m
      capstan::kill_thread(w);  // returned: the kill landed
    }
    EXPECT_TRUE(ended.take_for(std::chrono::seconds(5)).has_value());
    EXPECT_TRUE(owned_in_catch.load());
  });
}

// notify from a plain OS thread wakes a green waiter.
TEST_P(CondVar, AnOsThreadMayNotify) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    bool ready = false;
    std::thread os([&] {
      while (!m.try_lock()) std::this_thread::yield();
      ready = true;
      m.unlock();
      cv.notify_all();
    });
    std::unique_lock<capstan::mutex> lk(m);
    cv.wait(lk, [&] { return ready; });
    lk.unlock();
    os.join();
  });
}

TEST_P(CondVar, WaitWithoutTheLockIsAClearError) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    std::unique_lock<capstan::mutex> lk(m, std::defer_lock);
    EXPECT_THROW(cv.wait(lk), capstan::usage_error);
  });
}

// condition_variable_any with a lock that does not own its mutex: a
// usage_error before anything is queued (it was queued, then unlock()
// threw, and the next notify served a waiter on a dead frame).  A lock
// without owns_lock() whose unlock() throws leaves nothing queued either:
// the next notify goes to a real waiter, which it wakes.
TEST_P(CondVar, AnyWaitWithALockItDoesNotHoldLeavesNothingQueued) {
  struct throwing_lock {
    void lock() {}
    void unlock() { throw std::runtime_error("not held"); }
  };
  run([&] {
    capstan::mutex m;
    capstan::condition_variable_any cv;
    std::unique_lock<capstan::mutex> lk(m, std::defer_lock);
    EXPECT_THROW(cv.wait(lk), capstan::usage_error);
    std::shared_lock<capstan::shared_mutex> sl;  // no mutex at all
    EXPECT_THROW(cv.wait_for(sl, std::chrono::seconds(1)), capstan::usage_error);
    throwing_lock tl;
    EXPECT_THROW(cv.wait(tl), std::runtime_error);
    cv.notify_one();  // nobody queued: touches no dead frame
    bool woke = false;
    capstan::thread_id t = capstan::fork_io([&] {
      std::unique_lock<capstan::mutex> g(m);
      cv.wait(g);
      woke = true;
    });
    while (capstan::state_of(t) != capstan::thread_state::blocked) capstan::yield();
    cv.notify_one();  // the throwing waits left no entry to take this
    while (capstan::state_of(t) != capstan::thread_state::finished) capstan::yield();
    EXPECT_TRUE(woke);
  });
}

// ---- condition_variable_any ----

// The ping-pong of NoNotifyIsLostBetweenThePredicateCheckAndThePark, with
// condition_variable_any over three kinds of lock: capstan::mutex itself,
// a shared_mutex locked exclusively, and one locked shared to wait (the
// turn then passes under the exclusive lock).  A lost notify leaves both sides
// waiting, and deadlock detection ends the run with blocked_indefinitely.
TEST_P(CondVar, AnyLosesNoNotifyWithAnyLock) {
  const int kRounds = 5000 / kScale;
  int turns = 0;
  run([&] {
    for (int kind = 0; kind < 3; ++kind) {
      capstan::mutex m;
      capstan::shared_mutex sm;
      capstan::condition_variable_any cv;
      std::atomic<int> turn{0};
      capstan::wait_group wg(2);
      for (int me = 0; me < 2; ++me) {
        capstan::fork_io([&, me, kind] {
          std::minstd_rand rng(static_cast<unsigned>(me + 1 + kind));
          auto is_mine = [&] { return turn.load() == me; };
          for (int r = 0; r < kRounds; ++r) {
            switch (kind) {
              case 0: {
                m.lock();
                cv.wait(m, is_mine);
                turn = 1 - me;
                ++turns;  // under m
                m.unlock();
                break;
              }
              case 1: {
                std::unique_lock<capstan::shared_mutex> lk(sm);
                cv.wait(lk, is_mine);
                turn = 1 - me;
                ++turns;  // under sm, exclusively
                break;
              }
              default: {
                {
                  std::shared_lock<capstan::shared_mutex> lk(sm);
                  cv.wait(lk, is_mine);
                }
                std::unique_lock<capstan::shared_mutex> lk(sm);  // a change under a shared lock races
                turn = 1 - me;
                ++turns;
                break;
              }
            }
            if (rng() % 3 == 0) capstan::yield();
            cv.notify_one();
          }
          wg.done();
        });
      }
      wg.wait();
    }
  });
  EXPECT_EQ(turns, 3 * 2 * kRounds);
}

// Timed waits with capstan::mutex as the lock: they time out and return
// holding it.
TEST_P(CondVar, AnyTimedWaitsTimeOutHoldingTheLock) {
  run([&] {
    capstan::mutex m;
    capstan::condition_variable_any cv;
    m.lock();
    EXPECT_EQ(cv.wait_for(m, std::chrono::milliseconds(2)), std::cv_status::timeout);
    EXPECT_FALSE(m.try_lock());
    EXPECT_EQ(cv.wait_until(m, std::chrono::steady_clock::now() - std::chrono::seconds(1)),
              std::cv_status::timeout);
    EXPECT_FALSE(cv.wait_for(m, std::chrono::milliseconds(1), [] { return false; }));
    EXPECT_TRUE(cv.wait_until(m, std::chrono::steady_clock::now() + std::chrono::hours(1), [] { return true; }));
    EXPECT_FALSE(m.try_lock());
    m.unlock();
    capstan::shared_mutex sm;
    std::shared_lock<capstan::shared_mutex> r(sm);
    EXPECT_EQ(cv.wait_for(r, std::chrono::milliseconds(1)), std::cv_status::timeout);
    EXPECT_TRUE(r.owns_lock());
    EXPECT_FALSE(sm.try_lock());  // still held shared
  });
}

TEST_P(CondVar, AnyNotifyRacingATimeOutWakesExactlyOnce) {
  run([&] {
    notify_racing_a_time_out<capstan::condition_variable_any, capstan::mutex>(
        150 / kScale, [](capstan::mutex& m) { return std::unique_lock<capstan::mutex>(m); });
    notify_racing_a_time_out<capstan::condition_variable_any, capstan::shared_mutex>(
        150 / kScale, [](capstan::shared_mutex& m) { return std::shared_lock<capstan::shared_mutex>(m); });
  });
}

// kill_thread ends a condition_variable_any wait; the waiter holds its
// lock (here a shared_mutex, exclusively) again while the exception
// unwinds, and the next notify goes to the next waiter.
TEST_P(CondVar, AnyKilledWaiterUnwindsHoldingTheLock) {
  run([&] {
    capstan::shared_mutex sm;
    capstan::condition_variable_any cv;
    std::atomic<bool> owned_in_catch{false}, other_woke{false};
    capstan::thread_id a = capstan::fork_io([&] {
      std::unique_lock<capstan::shared_mutex> lk(sm);
      try {
        cv.wait(lk);
      } catch (const capstan::thread_killed&) {
        owned_in_catch = lk.owns_lock() && !sm.try_lock_shared();
        throw;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(a) == capstan::thread_state::blocked; }));
    capstan::thread_id b = capstan::fork_io([&] {
      std::unique_lock<capstan::shared_mutex> lk(sm);
      cv.wait(lk);
      other_woke = true;
    });
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(b) == capstan::thread_state::blocked; }));
    {
      std::lock_guard<capstan::shared_mutex> g(sm);  // a's re-lock must wait for us
      capstan::kill_thread(a);
    }
    ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(a) != capstan::thread_state::blocked &&
                                              capstan::state_of(a) != capstan::thread_state::running; }));
    EXPECT_TRUE(owned_in_catch.load());
    cv.notify_one();
    ASSERT_TRUE(green_wait_until([&] { return other_woke.load(); }));
    // wait for b: it unlocks sm after setting other_woke, and sm dies with
    // main's frame (and try_lock would fail while b holds it)
    ASSERT_TRUE(green_wait_until([&] { return ended(b); }));
    EXPECT_TRUE(sm.try_lock());
    sm.unlock();
  });
}

TEST(CondVarOutsideRun, WaitFromAPlainOsThreadIsAClearError) {
  capstan::mutex m;
  capstan::condition_variable cv;
  std::unique_lock<capstan::mutex> lk(m, std::defer_lock);
  try {
    cv.wait(lk);
    FAIL() << "wait outside run returned";
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("capstan::condition_variable::wait"), std::string::npos) << e.what();
  }
  cv.notify_one();  // works anywhere
  cv.notify_all();
}

}  // namespace
