// sync_test.cpp - the counting primitives and futures: counting_semaphore,
// latch, barrier, wait_group, promise/future, shared_mutex.  (mutex and
// condition_variable have their own files.)
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <cstring>
#include <memory>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::green_wait_until;
using capstan_test::kScale;
using capstan_test::WithCaps;

class Sync : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Sync);

bool blocked(capstan::thread_id t) { return capstan::state_of(t) == capstan::thread_state::blocked; }
// ended: t has finished, normally or killed (its destructors have run).
bool ended(capstan::thread_id t) {
  auto s = capstan::state_of(t);
  return s == capstan::thread_state::finished || s == capstan::thread_state::died;
}

// ---- counting_semaphore ----

// At most `kUnits` threads are ever inside; every acquire is matched.
TEST_P(Sync, SemaphoreBoundsConcurrency) {
  constexpr int kUnits = 3, kThreads = 12;
  std::atomic<int> inside{0}, peak{0};
  run([&] {
    capstan::counting_semaphore<kUnits> sem(kUnits);
    capstan::wait_group wg(kThreads);
    for (int i = 0; i < kThreads; ++i) {
      capstan::fork_io([&] {
        for (int k = 0; k < 300 / kScale; ++k) {
          sem.acquire();
          int now = inside.fetch_add(1) + 1;
          for (int p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
          }
          capstan::yield();
          inside.fetch_sub(1);
          sem.release();
        }
        wg.done();
      });
    }
    wg.wait();
    EXPECT_TRUE(sem.try_acquire());
    EXPECT_TRUE(sem.try_acquire());
    EXPECT_TRUE(sem.try_acquire());
    EXPECT_FALSE(sem.try_acquire());
  });
  EXPECT_LE(peak.load(), kUnits);
  EXPECT_GE(peak.load(), 1);
}

// release(n) hands units to the oldest waiters first, and a try_acquire
// cannot take a unit that a queued waiter is owed.
TEST_P(Sync, SemaphoreServesWaitersFifoAndTryAcquireCannotOvertake) {
  run([&] {
    capstan::binary_semaphore sem(0);
    std::vector<int> order;
    capstan::mutex om;
    capstan::thread_id t[3];
    for (int i = 0; i < 3; ++i) {
      t[i] = capstan::fork_io([&, i] {
        sem.acquire();
        std::lock_guard<capstan::mutex> g(om);
        order.push_back(i);
      });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t[i]); }));
    }
    for (int i = 0; i < 3; ++i) {
      sem.release();
      EXPECT_FALSE(sem.try_acquire()) << "try_acquire took a unit owed to a waiter";
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(t[i]) == capstan::thread_state::finished; }));
    }
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
    EXPECT_THROW(sem.release(2), capstan::usage_error);  // would pass max() == 1
    EXPECT_THROW(sem.release(-1), capstan::usage_error);
  });
}

// A release racing a time-out: the unit goes to the waiter (true) or stays
// in the semaphore (false), never both or neither.
TEST_P(Sync, SemaphoreTimedAcquireRacingAReleaseCountsOnce) {
  run([&] {
    capstan::counting_semaphore<> sem(0);
    for (int round = 0; round < 200 / kScale; ++round) {
      capstan::mvar<bool> got;
      capstan::fork_io([&] { got.put(sem.try_acquire_for(std::chrono::microseconds(200))); });
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(round % 400);
      while (std::chrono::steady_clock::now() < until) capstan::yield();
      sem.release();
      bool g = got.take();
      EXPECT_EQ(sem.try_acquire(), !g) << "round " << round;
      EXPECT_FALSE(sem.try_acquire());
    }
    EXPECT_FALSE(sem.try_acquire_until(std::chrono::steady_clock::now() + std::chrono::milliseconds(1)));
  });
}

// A killed acquirer leaves the queue: the unit goes to the next one.
TEST_P(Sync, SemaphoreKilledWaiterDoesNotTakeAUnit) {
  run([&] {
    capstan::counting_semaphore<> sem(0);
    std::atomic<bool> b_got{false};
    capstan::thread_id a = capstan::fork_io([&] { sem.acquire(); ADD_FAILURE() << "killed waiter got a unit"; });
    ASSERT_TRUE(green_wait_until([&] { return blocked(a); }));
    capstan::thread_id b = capstan::fork_io([&] { sem.acquire(); b_got = true; });
    ASSERT_TRUE(green_wait_until([&] { return blocked(b); }));
    capstan::kill_thread(a);
    sem.release();
    ASSERT_TRUE(green_wait_until([&] { return b_got.load(); }));
    EXPECT_FALSE(sem.try_acquire());
  });
}

// ---- latch ----

TEST_P(Sync, LatchReleasesEveryWaiterAtZero) {
  constexpr int kWaiters = 8;
  std::atomic<int> passed{0};
  run([&] {
    capstan::latch l(3);
    capstan::wait_group wg(kWaiters);
    for (int i = 0; i < kWaiters; ++i)
      capstan::fork_io([&] {
        l.wait();
        passed.fetch_add(1);
        wg.done();
      });
    l.count_down();
    l.count_down();
    for (int k = 0; k < 20; ++k) capstan::yield();
    EXPECT_EQ(passed.load(), 0) << "a waiter passed before zero";
    EXPECT_FALSE(l.try_wait());
    std::thread os([&] { l.count_down(); });  // any thread may count down
    os.join();
    wg.wait();
    EXPECT_TRUE(l.try_wait());
    EXPECT_THROW(l.count_down(), capstan::usage_error);
  });
  EXPECT_EQ(passed.load(), kWaiters);
}

TEST_P(Sync, LatchArriveAndWaitMeetsEveryone) {
  constexpr int kThreads = 10;
  std::atomic<int> before{0};
  std::atomic<bool> early{false};
  run([&] {
    capstan::latch l(kThreads);
    capstan::wait_group wg(kThreads);
    for (int i = 0; i < kThreads; ++i)
      capstan::fork_io([&] {
        before.fetch_add(1);
        l.arrive_and_wait();
        if (before.load() != kThreads) early = true;
        wg.done();
      });
    wg.wait();
  });
  EXPECT_FALSE(early.load());
}

// ---- barrier ----

// kill_in_the_completion kills `last`, which is blocked at `gate` inside a
// barrier's completion function, and opens the gate only once the kill
// waits for the phase to complete (a sleep instead raced the kill).
void kill_in_the_completion(capstan::thread_id last, capstan::mvar<int>& gate) {
  const capstan::thread_id me = capstan::self();
  capstan::async opener([&] {
    (void)green_wait_until([&] { return blocked(me); });
    gate.put(1);
  });
  capstan::kill_thread(last);  // reaches the completion, blocked in it
  opener.wait();
}

// Note [Completing a phase]: the last arrival made from a destructor at an
// ordinary scope exit (arrive_and_drop in a guard), with a kill reaching
// the completion function.  arrive_n raised the pending kill itself once
// the phase was complete - out of the noexcept destructor: std::terminate.
// Now it raises nothing; the kill waits for the thread's next yield.
TEST_P(Sync, ALastArrivalFromADestructorRaisesNothingThere) {
  run([&] {
    // The completion blocks until main's kill waits for the phase (a gate,
    // not a 20 ms sleep that main's 5 ms sleep had to land inside: on a
    // loaded machine main came late, after the yield, and nothing landed).
    std::atomic<bool> in_completion{false};
    capstan::mvar<int> gate;
    auto on_done = [&]() noexcept {
      in_completion = true;
      gate.take();
    };
    capstan::barrier<decltype(on_done)> b(2, on_done);
    capstan::mvar<int> waiter_done, killed_at_yield;
    capstan::thread_id waiter = capstan::fork_io([&] {
      b.arrive_and_wait();
      waiter_done.put(1);
    });
    // The waiter arrives first, so that `last` is the last arrival (at -N2
    // and up it could otherwise arrive second, and `last` run no completion).
    ASSERT_TRUE(green_wait_until([&] { return blocked(waiter); }));
    std::atomic<bool> arriving{false};
    capstan::thread_id last = capstan::fork_io([&] {
      struct drops {
        capstan::barrier<decltype(on_done)>& b;
        ~drops() { b.arrive_and_drop(); }  // the last arrival: runs the completion
      };
      {
        drops d{b};
        arriving = true;
      }
      try {
        capstan::yield();
        killed_at_yield.put(0);
      } catch (const capstan::thread_killed&) {
        killed_at_yield.put(1);
        throw;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return arriving.load() && in_completion.load() && blocked(last); }));
    kill_in_the_completion(last, gate);
    EXPECT_EQ(waiter_done.take(), 1);
    EXPECT_EQ(killed_at_yield.take(), 1);
  });
}

// Note [Completing a phase]: a kill that reaches the completion function
// (here at its sleep) waits until the phase is complete - the completion
// must not throw, and it terminated the process - and stays pending for
// the last arriver's next yield or blocking call, after the phase's
// waiters have been released.
TEST_P(Sync, AKillDuringTheCompletionIsRaisedOnceThePhaseIsComplete) {
  run([&] {
    std::atomic<int> completions{0};
    // A gate, not a sleep main had to land inside: as in the test above.
    std::atomic<bool> in_completion{false};
    capstan::mvar<int> gate;
    auto on_done = [&]() noexcept {
      in_completion = true;
      gate.take();
      completions.fetch_add(1);
    };
    capstan::barrier<decltype(on_done)> b(2, on_done);
    capstan::mvar<int> waiter_done, last_killed;
    capstan::thread_id waiter = capstan::fork_io([&] {
      b.arrive_and_wait();
      waiter_done.put(1);
    });
    // The waiter arrives first, so that `last` runs the completion.
    ASSERT_TRUE(green_wait_until([&] { return blocked(waiter); }));
    std::atomic<bool> arriving{false};
    capstan::thread_id last = capstan::fork_io([&] {
      try {
        arriving = true;
        b.arrive_and_wait();  // the last arrival: runs the completion
        capstan::yield();     // the pending kill is raised here
        last_killed.put(0);
      } catch (const capstan::thread_killed&) {
        last_killed.put(completions.load());
        throw;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return arriving.load() && in_completion.load() && blocked(last); }));
    kill_in_the_completion(last, gate);
    EXPECT_EQ(waiter_done.take(), 1) << "the phase's waiter was not released";
    EXPECT_EQ(last_killed.take(), 1) << "the kill was not raised after the completion, at the yield";
    EXPECT_EQ(completions.load(), 1);
  });
}


// Phases: nobody leaves phase p before everyone arrived in it, and the
// completion runs exactly once per phase, before anyone is released.
TEST_P(Sync, BarrierPhasesAndCompletion) {
  constexpr int kThreads = 6, kPhases = 50;
  std::atomic<int> completions{0};
  std::atomic<int> arrived[kPhases] = {};
  std::atomic<bool> bad{false};
  run([&] {
    auto on_done = [&]() noexcept { completions.fetch_add(1); };
    capstan::barrier<decltype(on_done)> b(kThreads, on_done);
    capstan::wait_group wg(kThreads);
    for (int i = 0; i < kThreads; ++i)
      capstan::fork_io([&, i] {
        for (int p = 0; p < kPhases; ++p) {
          arrived[p].fetch_add(1);
          if ((i + p) % 2) {
            b.arrive_and_wait();
          } else {
            auto tok = b.arrive();
            capstan::yield();
            b.wait(std::move(tok));
          }
          if (arrived[p].load() != kThreads || completions.load() < p + 1) bad = true;
        }
        wg.done();
      });
    wg.wait();
  });
  EXPECT_FALSE(bad.load());
  EXPECT_EQ(completions.load(), kPhases);
}

TEST_P(Sync, BarrierArriveAndDropShrinksLaterPhases) {
  run([&] {
    capstan::barrier<> b(3);
    capstan::mvar<int> done;
    capstan::fork_io([&] { b.arrive_and_drop(); done.put(1); });
    capstan::fork_io([&] { b.arrive_and_wait(); b.arrive_and_wait(); done.put(2); });
    b.arrive_and_wait();  // phase 0: three
    b.arrive_and_wait();  // phase 1: two
    done.take();
    done.take();
    (void)b.arrive();
    EXPECT_THROW((void)b.arrive(2), capstan::usage_error);  // one left in this phase
  });
}

// ---- wait_group ----

TEST_P(Sync, WaitGroupWaitsForEveryDone) {
  const int kThreads = 2000 / kScale;
  std::atomic<int> finished{0};
  run([&] {
    capstan::wait_group wg;
    wg.add(kThreads);
    for (int i = 0; i < kThreads; ++i)
      capstan::fork_io([&] {
        finished.fetch_add(1);
        wg.done();
      });
    wg.wait();
    EXPECT_EQ(finished.load(), kThreads);
    wg.wait();  // zero: returns at once
    EXPECT_THROW(wg.done(), capstan::usage_error);
    wg.add(1);
    std::thread os([&] { wg.done(); });  // any thread may call done
    wg.wait();
    os.join();
  });
}

// Several waiters, the last done() races their queueing (Note [Waiting for
// a group]); a lost wake-up would hang (deadlock detection then fails it).
TEST_P(Sync, WaitGroupLastDoneRacingWaitersWakesAll) {
  run([&] {
    for (int round = 0; round < 300 / kScale; ++round) {
      capstan::wait_group wg(3), all(4);
      for (int i = 0; i < 3; ++i) capstan::fork_io([&] { capstan::yield(); wg.done(); });
      for (int i = 0; i < 4; ++i) capstan::fork_io([&] { wg.wait(); all.done(); });
      all.wait();
    }
  });
}

// ---- promise / future ----

TEST_P(Sync, FutureGetParksUntilTheValueIsSet) {
  run([&] {
    capstan::promise<std::string> p;
    capstan::future<std::string> f = p.get_future();
    EXPECT_TRUE(f.valid());
    EXPECT_EQ(f.wait_for(std::chrono::milliseconds(1)), std::future_status::timeout);
    capstan::fork_io([&] { p.set_value("hello"); });
    EXPECT_EQ(f.get(), "hello");
    EXPECT_FALSE(f.valid());
    EXPECT_THROW(f.get(), std::future_error);
    EXPECT_THROW(p.set_value("again"), std::future_error);
    EXPECT_THROW(p.get_future(), std::future_error);
  });
}

TEST_P(Sync, FutureCarriesExceptionsAndVoidAndBrokenPromises) {
  run([&] {
    capstan::promise<void> pv;
    auto fv = pv.get_future();
    std::thread os([&] { pv.set_value(); });  // any thread may set it
    fv.get();
    os.join();

    capstan::promise<int> pe;
    auto fe = pe.get_future();
    capstan::fork_io([&] { pe.set_exception(std::make_exception_ptr(std::runtime_error("bad"))); });
    EXPECT_THROW(fe.get(), std::runtime_error);

    // A null exception_ptr is refused, and the promise stays unsatisfied.
    capstan::promise<std::string> pn;
    auto fn = pn.get_future();
    EXPECT_THROW(pn.set_exception(nullptr), capstan::usage_error);
    EXPECT_FALSE(fn.wait_for(std::chrono::milliseconds(0)) == std::future_status::ready);
    pn.set_value("set");
    EXPECT_EQ(fn.get(), "set");

    capstan::future<int> fb;
    {
      capstan::promise<int> dies;
      fb = dies.get_future();
    }
    try {
      fb.get();
      FAIL() << "no broken_promise";
    } catch (const std::future_error& e) {
      EXPECT_EQ(e.code(), std::future_errc::broken_promise);
    }
  });
}

TEST_P(Sync, ManyWaitersOnOneFutureAreAllWoken) {
  run([&] {
    capstan::promise<int> p;
    auto f = p.get_future();
    std::atomic<int> sum{0};
    capstan::wait_group wg(8);
    for (int i = 0; i < 8; ++i) capstan::fork_io([&] { f.wait(); sum.fetch_add(1); wg.done(); });
    capstan::yield();
    p.set_value(5);
    wg.wait();
    EXPECT_EQ(sum.load(), 8);
    EXPECT_EQ(f.get(), 5);
  });
}

// ---- shared_mutex ----

// Readers share, a writer excludes everyone; a queued writer is not
// starved by a stream of new readers.
TEST_P(Sync, SharedMutexExcludesWritersAndDoesNotStarveThem) {
  std::atomic<int> readers{0}, writers{0};
  std::atomic<bool> bad{false};
  long value = 0;
  run([&] {
    capstan::shared_mutex sm;
    capstan::wait_group wg(8);
    for (int i = 0; i < 8; ++i)
      capstan::fork_io([&, i] {
        for (int k = 0; k < 300 / kScale; ++k) {
          if ((i + k) % 4 == 0) {
            std::unique_lock<capstan::shared_mutex> g(sm);
            if (writers.fetch_add(1) != 0 || readers.load() != 0) bad = true;
            ++value;
            capstan::yield();
            writers.fetch_sub(1);
          } else {
            std::shared_lock<capstan::shared_mutex> g(sm);
            readers.fetch_add(1);
            if (writers.load() != 0) bad = true;
            capstan::yield();
            readers.fetch_sub(1);
          }
        }
        wg.done();
      });
    wg.wait();

    // A writer queued behind a reader gets in before a later reader.
    sm.lock_shared();
    std::atomic<bool> wrote{false};
    capstan::thread_id w = capstan::fork_io([&] { std::lock_guard<capstan::shared_mutex> g(sm); wrote = true; });
    ASSERT_TRUE(green_wait_until([&] { return blocked(w); }));
    EXPECT_FALSE(sm.try_lock_shared()) << "a new reader overtook a queued writer";
    sm.unlock_shared();
    ASSERT_TRUE(green_wait_until([&] { return wrote.load(); }));
    // wait for w: it unlocks sm after setting wrote, and sm dies with main's
    // frame (and try_lock would fail while w holds it)
    ASSERT_TRUE(green_wait_until([&] { return ended(w); }));
    EXPECT_TRUE(sm.try_lock());
    sm.unlock();
  });
  EXPECT_FALSE(bad.load());
  EXPECT_EQ(value, 8 * (300 / kScale) / 4);
}

// The timed locks of shared_timed_mutex give up while a writer holds it
// (not before the time limit), through the std wrappers too, and succeed
// once it is free.
TEST_P(Sync, SharedTimedLocksTimeOutAndLeaveTheMutexUsable) {
  run([&] {
    capstan::shared_timed_mutex sm;
    sm.lock();
    capstan::mvar<int> done;
    capstan::fork_io([&] {
      auto t0 = std::chrono::steady_clock::now();
      EXPECT_FALSE(sm.try_lock_for(std::chrono::milliseconds(2)));
      EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2));
      t0 = std::chrono::steady_clock::now();
      EXPECT_FALSE(sm.try_lock_shared_for(std::chrono::milliseconds(2)));
      EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2));
      auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
      EXPECT_FALSE(sm.try_lock_until(past));
      EXPECT_FALSE(sm.try_lock_shared_until(past));
      std::shared_lock<capstan::shared_timed_mutex> r(sm, std::chrono::milliseconds(1));
      EXPECT_FALSE(r.owns_lock());
      std::unique_lock<capstan::shared_timed_mutex> w(sm, std::chrono::milliseconds(1));
      EXPECT_FALSE(w.owns_lock());
      done.put(1);
    });
    done.take();
    sm.unlock();
    EXPECT_TRUE(sm.try_lock_shared_for(std::chrono::milliseconds(1)));
    EXPECT_TRUE(sm.try_lock_shared_until(std::chrono::steady_clock::now() + std::chrono::seconds(1)));
    EXPECT_FALSE(sm.try_lock_for(std::chrono::milliseconds(1)));  // readers hold it
    sm.unlock_shared();
    sm.unlock_shared();
    {
      std::unique_lock<capstan::shared_timed_mutex> w(sm, std::chrono::milliseconds(1));
      EXPECT_TRUE(w.owns_lock());
    }
    std::shared_lock<capstan::shared_timed_mutex> r(sm, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    EXPECT_TRUE(r.owns_lock());
  });
}

// A writer that leaves the queue - timed out, or killed in lock or in a
// timed lock (both are interruptible) - while readers hold the lock must
// let the readers queued behind it in at once: they waited only because
// of it (Note [Leaving the shared_mutex queue]).
// Without that they would wait for the holder's unlock, which here comes
// only after they got in.
TEST_P(Sync, AWriterLeavingTheQueueLetsTheReadersBehindItIn) {
  run([&] {
    capstan::shared_timed_mutex sm;
    for (int how = 0; how < 3; ++how) {  // time-out, kill in lock, kill in try_lock_for
      sm.lock_shared();
      std::atomic<bool> writer_got{false}, writer_killed{false};
      capstan::thread_id w = capstan::fork_io([&, how] {
        try {
          if (how != 1) {
            writer_got = sm.try_lock_for(how == 0 ? std::chrono::milliseconds(50) : std::chrono::hours(1));
          } else {
            sm.lock();
            writer_got = true;
          }
        } catch (const capstan::thread_killed&) {
          writer_killed = true;
        }
        if (writer_got) sm.unlock();
      });
      // (A timed-out writer may even be gone before we look, on a busy
      // host: then the readers have nobody ahead of them.)
      ASSERT_TRUE(green_wait_until([&] {
        return blocked(w) || (how == 0 && capstan::state_of(w) == capstan::thread_state::finished);
      }));
      std::atomic<int> readers_in{0};
      capstan::wait_group wg(3);
      std::vector<capstan::thread_id> readers;
      for (int i = 0; i < 3; ++i)
        readers.push_back(capstan::fork_io([&, i] {
          if (i == 0) {
            sm.lock_shared();
          } else {
            while (!sm.try_lock_shared_for(std::chrono::seconds(60))) {
            }
          }
          readers_in.fetch_add(1);
          sm.unlock_shared();
          wg.done();
        }));
      if (how != 0) {  // (the timed-out writer may leave before they all queue)
        for (capstan::thread_id r : readers) ASSERT_TRUE(green_wait_until([&] { return blocked(r); }));
        capstan::kill_thread(w);
      }
      ASSERT_TRUE(green_wait_until([&] { return readers_in.load() == 3; }))
          << (how == 0 ? "timed-out" : "killed") << " writer kept the readers behind it waiting";
      wg.wait();
      // wait for w: it sets writer_got/writer_killed after the time-out or
      // the kill, and they die with the round
      ASSERT_TRUE(green_wait_until([&] { return ended(w); }));
      EXPECT_FALSE(writer_got.load());
      EXPECT_EQ(writer_killed.load(), how != 0);
      sm.unlock_shared();
      EXPECT_TRUE(sm.try_lock()) << "the lock was lost";
      sm.unlock();
    }
  });
}

// Once kill_thread has returned the killed waiter is off the queue, and
// the program may unlock and destroy the shared_mutex while the waiter is
// still unwinding: the waiter must not touch it again (it ran the grant on
// the freed object and spun on its lock word for ever).  The memory is
// reused at once, with a pattern that reads as "locked"; under ASan a
// touch is a heap-use-after-free.  Both kinds of waiter, killed in an
// untimed and a timed lock.
TEST_P(Sync, ASharedMutexMayBeDestroyedOnceItsKilledWaiterIsOffTheQueue) {
  run([&] {
    for (int how = 0; how < 4; ++how) {  // reader/writer x untimed/timed
      auto sm = std::make_unique<capstan::shared_mutex>();
      sm->lock();
      bool writer = how & 1, timed = how & 2;
      capstan::shared_mutex* raw = sm.get();
      capstan::thread_id w = capstan::fork_io([raw, writer, timed] {
        if (writer) {
          if (timed) (void)raw->try_lock_for(std::chrono::hours(1)); else raw->lock();
        } else {
          if (timed) (void)raw->try_lock_shared_for(std::chrono::hours(1)); else raw->lock_shared();
        }
        ADD_FAILURE() << "the waiter was granted a lock nobody released";
      });
      ASSERT_TRUE(green_wait_until([&] { return blocked(w); }));
      capstan::kill_thread(w);
      sm->unlock();
      sm.reset();
      // Reuse the freed memory with a pattern whose lock byte is set.
      std::vector<std::unique_ptr<unsigned char[]>> reuse;
      for (int i = 0; i < 64; ++i) {
        reuse.emplace_back(new unsigned char[sizeof(capstan::shared_mutex)]);
        std::memset(reuse.back().get(), 0xff, sizeof(capstan::shared_mutex));
      }
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(w) != capstan::thread_state::blocked &&
                                                capstan::state_of(w) != capstan::thread_state::running; }))
          << "the killed waiter never finished unwinding";
    }
  });
}

// A release racing with a timed lock's time-out, for both kinds: exactly
// one outcome.  A waiter granted the lock that also reported a time-out
// would never release it, and the final lock would hang; one that got it
// but was also taken off by the timer would leave readers_ or writer_ wrong.
TEST_P(Sync, ASharedMutexReleaseRacingATimeOutGrantsOnce) {
  int got = 0, timed_out = 0;
  const int kRounds = 200 / kScale;
  run([&] {
    capstan::shared_timed_mutex sm;
    std::mt19937 rng(7);
    for (int round = 0; round < kRounds; ++round) {
      sm.lock();
      capstan::mvar<bool> result;
      bool shared = round % 2 != 0;
      capstan::fork_io([&, shared] {
        bool ok = shared ? sm.try_lock_shared_for(std::chrono::microseconds(300))
                         : sm.try_lock_for(std::chrono::microseconds(300));
        if (ok) {
          if (shared) sm.unlock_shared(); else sm.unlock();
        }
        result.put(ok);
      });
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 600);
      while (std::chrono::steady_clock::now() < until) capstan::yield();
      sm.unlock();
      (result.take() ? got : timed_out)++;
      std::unique_lock<capstan::shared_timed_mutex> g(sm);  // never lost
    }
  });
  EXPECT_EQ(got + timed_out, kRounds);
}

// Timed writers keep the writer preference: a reader that comes after a
// queued timed writer waits behind it, and gets in when it times out.
TEST_P(Sync, ATimedWriterIsNotOvertakenByLaterReaders) {
  run([&] {
    capstan::shared_timed_mutex sm;
    sm.lock_shared();
    std::atomic<bool> wrote{false};
    capstan::thread_id w = capstan::fork_io([&] {
      if (sm.try_lock_for(std::chrono::seconds(60))) {
        wrote = true;
        sm.unlock();
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return blocked(w); }));
    EXPECT_FALSE(sm.try_lock_shared()) << "a new reader overtook a queued timed writer";
    EXPECT_FALSE(sm.try_lock_shared_for(std::chrono::milliseconds(1)));
    sm.unlock_shared();
    ASSERT_TRUE(green_wait_until([&] { return wrote.load(); }));
    // wait for w: it unlocks sm after setting wrote, and sm dies with main's
    // frame
    ASSERT_TRUE(green_wait_until([&] { return ended(w); }));
  });
}

TEST(SyncOutsideRun, BlockingCallsFromAPlainOsThreadAreClearErrors) {
  capstan::counting_semaphore<> sem(1);
  EXPECT_THROW(sem.acquire(), capstan::usage_error);  // even when it would not block
  EXPECT_TRUE(sem.try_acquire());
  sem.release();
  capstan::latch l(0);
  EXPECT_THROW(l.wait(), capstan::usage_error);
  EXPECT_TRUE(l.try_wait());
  capstan::wait_group wg;
  try {
    wg.wait();
    FAIL();
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("capstan::wait_group::wait"), std::string::npos);
  }
  capstan::barrier<> b(1);
  EXPECT_THROW(b.arrive_and_wait(), capstan::usage_error);
  capstan::promise<int> p;
  auto f = p.get_future();
  p.set_value(1);
  EXPECT_THROW(f.get(), capstan::usage_error);
  capstan::shared_mutex sm;
  EXPECT_THROW(sm.lock_shared(), capstan::usage_error);
  EXPECT_THROW(sm.try_lock_shared_for(std::chrono::milliseconds(1)), capstan::usage_error);
  EXPECT_THROW(sm.try_lock_until(std::chrono::steady_clock::now()), capstan::usage_error);
  EXPECT_TRUE(sm.try_lock_shared());
  sm.unlock_shared();
}

}  // namespace
