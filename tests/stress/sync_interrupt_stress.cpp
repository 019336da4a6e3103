// sync_interrupt_stress.cpp - random throw_to "pokes" (caught: the thread
// carries on) and timeout()s against the waits of the mutexes, the
// semaphore, the shared_mutex and the condition variable, across
// capabilities: mutual exclusion holds, no unit is lost or duplicated,
// every item is consumed once, a condition variable's waiter always holds
// its mutex again, and every primitive is free at the end.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <vector>

#include "stress.hpp"

namespace {

using namespace std::chrono_literals;
using capstan_test::WithCaps;

class SyncInterruptStress : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(SyncInterruptStress);

struct poke {};
struct dec {
  std::atomic<int>& a;
  ~dec() { a.fetch_sub(1); }
};

// Operations per worker (fewer under the sanitizers: stress::kScale).
long iters() { return 30000 / stress::kScale; }

// poker: throws `poke` at random workers until stop.  A worker's id is in
// `ids` only once the worker has put it there itself: a thread poked
// before its first run would die without running its body (as in GHC), and
// the test would wait for it for ever.
capstan::thread_id start_poker(std::vector<capstan::mvar<capstan::thread_id>>& ids,
                               std::atomic<bool>& stop, std::uint64_t seed,
                               capstan::mvar<int>& done) {
  return capstan::fork_io([&ids, &stop, &done, seed] {
    std::mt19937_64 rng(seed);
    while (!stop.load()) {
      capstan::thread_id t = ids[rng() % ids.size()].read();
      capstan::throw_to(t, poke{});
      if (rng() % 2)
        capstan::yield();
      else
        capstan::sleep_for(std::chrono::microseconds(rng() % 200));
    }
    done.put(0);
  });
}

// count_done counts the worker done; a poke raised as the mask ends (it
// came after the last step) is caught, so the count is never skipped.
void count_done(capstan::wait_group& wg) {
  try {
    capstan::mask([&] { wg.done(); });
  } catch (const poke&) {
  }
}

// run_poked runs `n` workers, each calling step(rng) iters() times (a poke
// is caught between steps), against a poker, and returns once all of them
// and the poker have finished.
template <class Step>
void run_poked(int n, std::uint64_t seed, Step step) {
  std::vector<capstan::mvar<capstan::thread_id>> ids(n);
  capstan::wait_group wg(n);
  std::atomic<bool> stop{false};
  capstan::mvar<int> poker_done;
  for (int i = 0; i < n; ++i) {
    capstan::fork_io([&, i] {
      ids[i].put(capstan::self());  // See start_poker.
      std::mt19937_64 rng(seed * 31 + static_cast<std::uint64_t>(i));
      for (long k = 0; k < iters(); ++k) {
        try {
          step(rng);
        } catch (const poke&) {
        }
      }
      count_done(wg);
    });
  }
  start_poker(ids, stop, seed, poker_done);
  wg.wait();
  stop = true;
  poker_done.take();
}

TEST_P(SyncInterruptStress, MutexAndTimedMutex) {
  stress::Watchdog wd(std::chrono::seconds(120), "MutexAndTimedMutex");
  const std::uint64_t seed = stress::seed() + caps();
  std::atomic<long> ops{0}, bad{0};
  run([&] {
    capstan::timed_mutex tm;
    capstan::mutex m;
    std::atomic<int> inside{0}, inside2{0};
    run_poked(6, seed, [&](std::mt19937_64& rng) {
      try {
        // Taken masked, so that a poke cannot come between taking the lock
        // and handing it to its owner; the waits inside stay interruptible.
        std::unique_lock<capstan::timed_mutex> ul = capstan::mask([&] {
          bool got = false;
          auto us = std::chrono::microseconds(rng() % 300);
          switch (rng() % 5) {
            case 0:
              tm.lock();
              got = true;
              break;
            case 1:
              got = tm.try_lock_for(us);
              break;
            case 2:
              got = capstan::timeout(us, [&] { tm.lock(); });
              break;
            case 3:
              got = tm.try_lock();
              break;
            case 4:
              got = capstan::timeout(us, [&] { return tm.try_lock_for(us); }).value_or(false);
              break;
          }
          return got ? std::unique_lock<capstan::timed_mutex>(tm, std::adopt_lock)
                     : std::unique_lock<capstan::timed_mutex>();
        });
        if (ul.owns_lock()) {
          if (inside.fetch_add(1) != 0) ++bad;
          dec d{inside};
          ++ops;
          if (rng() % 3 == 0) capstan::yield();
        }
        std::lock_guard<capstan::mutex> g(m);
        if (inside2.fetch_add(1) != 0) ++bad;
        dec d{inside2};
        if (rng() % 4 == 0) capstan::yield();
      } catch (const capstan::timeout_expired&) {
        ++bad;  // timeout() catches its own
      }
    });
    EXPECT_TRUE(tm.try_lock());
    tm.unlock();
    EXPECT_TRUE(m.try_lock());
    m.unlock();
  });
  std::fprintf(stderr, "mutex ops %ld\n", ops.load());
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(SyncInterruptStress, Semaphore) {
  stress::Watchdog wd(std::chrono::seconds(120), "Semaphore");
  const std::uint64_t seed = stress::seed() + caps();
  constexpr int kUnits = 2;
  std::atomic<long> bad{0};
  run([&] {
    capstan::counting_semaphore<kUnits> sem(kUnits);
    std::atomic<int> inside{0};
    run_poked(6, seed, [&](std::mt19937_64& rng) {
      try {
        // Acquired, used and released under one mask: a poke lands only in
        // the waits, never between taking a unit and giving it back.
        capstan::mask([&] {
          bool got = false;
          auto us = std::chrono::microseconds(rng() % 300);
          switch (rng() % 4) {
            case 0:
              sem.acquire();
              got = true;
              break;
            case 1:
              got = sem.try_acquire_for(us);
              break;
            case 2:
              got = capstan::timeout(us, [&] { sem.acquire(); });
              break;
            case 3:
              got = sem.try_acquire();
              break;
          }
          if (!got) return;
          if (inside.fetch_add(1) >= kUnits) ++bad;
          inside.fetch_sub(1);
          sem.release();
        });
        if (rng() % 3 == 0) capstan::yield();
      } catch (const capstan::timeout_expired&) {
        ++bad;
      }
    });
    for (int u = 0; u < kUnits; ++u) EXPECT_TRUE(sem.try_acquire()) << "unit lost";
    EXPECT_FALSE(sem.try_acquire()) << "unit duplicated";
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(SyncInterruptStress, SharedMutex) {
  stress::Watchdog wd(std::chrono::seconds(120), "SharedMutex");
  const std::uint64_t seed = stress::seed() + caps();
  std::atomic<long> bad{0};
  run([&] {
    capstan::shared_mutex sm;
    std::atomic<int> readers{0}, writers{0};
    // holder releases what it holds, exclusive or shared.
    struct holder {
      capstan::shared_mutex* m = nullptr;
      bool w = false;
      holder() = default;
      holder(capstan::shared_mutex* m, bool w) : m(m), w(w) {}
      holder(holder&& o) noexcept : m(o.m), w(o.w) { o.m = nullptr; }
      ~holder() {
        if (m && w) m->unlock();
        if (m && !w) m->unlock_shared();
      }
    };
    run_poked(7, seed, [&](std::mt19937_64& rng) {
      try {
        bool write = rng() % 3 == 0;
        auto us = std::chrono::microseconds(rng() % 300);
        holder h = capstan::mask([&] {  // as in MutexAndTimedMutex
          bool got = false;
          switch (rng() % 3) {
            case 0:
              write ? sm.lock() : sm.lock_shared();
              got = true;
              break;
            case 1:
              got = write ? sm.try_lock_for(us) : sm.try_lock_shared_for(us);
              break;
            case 2:
              got = capstan::timeout(us, [&] { write ? sm.lock() : sm.lock_shared(); });
              break;
          }
          return got ? holder(&sm, write) : holder();
        });
        if (!h.m) return;
        if (write) {
          if (writers.fetch_add(1) != 0 || readers.load() != 0) ++bad;
          dec d{writers};
          if (rng() % 3 == 0) capstan::yield();
        } else {
          readers.fetch_add(1);
          dec d{readers};
          if (writers.load() != 0) ++bad;
          if (rng() % 3 == 0) capstan::yield();
        }
      } catch (const capstan::timeout_expired&) {
        ++bad;
      }
    });
    EXPECT_TRUE(sm.try_lock());
    sm.unlock();
  });
  EXPECT_EQ(bad.load(), 0);
}

// Producer/consumer through a cv; consumers poked and timed out; every item
// consumed exactly once; lk held whenever a wait throws.
TEST_P(SyncInterruptStress, CondVar) {
  stress::Watchdog wd(std::chrono::seconds(120), "CondVar");
  const std::uint64_t seed = stress::seed() + caps();
  constexpr int kC = 5, kP = 2;
  std::atomic<long> bad{0}, consumed{0};
  long produced_total = 0;
  run([&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    long items = 0;
    bool stop = false;
    std::atomic<bool> pstop{false};
    std::vector<capstan::mvar<capstan::thread_id>> ids(kC);
    capstan::wait_group wg(kC), pwg(kP);
    capstan::mvar<int> pdone;
    for (int i = 0; i < kC; ++i) {
      capstan::fork_io([&, i] {
        std::mt19937_64 rng(seed * 7 + static_cast<std::uint64_t>(i));
        std::unique_lock<capstan::mutex> lk(m);
        ids[i].put(capstan::self());  // See start_poker.
        for (;;) {
          try {
            switch (rng() % 3) {
              case 0:
                cv.wait(lk, [&] { return items > 0 || stop; });
                break;
              case 1:
                cv.wait_for(lk, std::chrono::microseconds(rng() % 300),
                            [&] { return items > 0 || stop; });
                break;
              case 2:
                (void)capstan::timeout(std::chrono::microseconds(rng() % 300),
                                       [&] { cv.wait(lk, [&] { return items > 0 || stop; }); });
                break;
            }
          } catch (const poke&) {
          }
          if (!lk.owns_lock()) {
            ++bad;
            lk.release();
            break;
          }
          if (items > 0) {
            --items;
            ++consumed;
          } else if (stop) {
            break;
          }
        }
        if (lk.owns_lock()) lk.unlock();  // noexcept: not a safe point
        count_done(wg);
      });
    }
    for (int j = 0; j < kP; ++j) {
      capstan::fork_io([&, j] {
        std::mt19937_64 rng(seed * 5 + j);
        for (long k = 0; k < iters(); ++k) {
          {
            std::lock_guard<capstan::mutex> g(m);
            ++items;
            ++produced_total;
          }
          cv.notify_one();
          if (rng() % 2) capstan::yield();
        }
        pwg.done();
      });
    }
    start_poker(ids, pstop, seed, pdone);
    pwg.wait();
    // wait for the consumers to drain (poked ones still consume)
    for (;;) {
      {
        std::lock_guard<capstan::mutex> g(m);
        if (items == 0) break;
      }
      capstan::sleep_for(1ms);
    }
    pstop = true;
    pdone.take();
    {
      std::lock_guard<capstan::mutex> g(m);
      stop = true;
    }
    cv.notify_all();
    wg.wait();
  });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(consumed.load(), produced_total);
}

}  // namespace
