// sync_stress.cpp - the sync primitives under randomised interleavings at
// -N1/-N2/-N4: a mutex + condition_variable bounded queue with timed waits
// and killed bystanders (every item delivered exactly once, the mutex never
// lost), a million condition-variable waits that must each match a notify
// (no spurious wake-ups; condition_variable and condition_variable_any),
// timed waits nobody notifies (all time out), and semaphore/barrier/
// wait_group rounds.
#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include "stress.hpp"

namespace {

class SyncStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, SyncStress, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

capstan::options opts(unsigned caps) { return capstan_test::opts(caps, std::chrono::microseconds(500)); }

// Producers and consumers on a bounded queue guarded by one mutex and two
// condition variables, with random yields, random timed waits, and
// bystander threads that lock the mutex or wait on a condition variable
// and are killed at random.  Items are delivered exactly once (the sums
// match); a lost notify or a mutex lost with a killed waiter hangs
// (watchdog).
TEST_P(SyncStress, BoundedQueueWithTimedWaitsAndKills) {
  stress::Watchdog dog(std::chrono::seconds(120), "sync bounded queue");
  constexpr int kProducers = 4, kConsumers = 4, kCapacity = 3;
  const long kItems = 40000 / stress::kScale;  // per producer
  std::atomic<long> produced{0}, consumed{0}, timeouts{0}, kills{0};
  capstan::run(opts(GetParam()), [&] {
    capstan::mutex m;
    capstan::condition_variable not_full, not_empty, idle;
    std::deque<long> q;  // guarded by m
    int producers_left = kProducers;  // guarded by m
    capstan::wait_group wg(kProducers + kConsumers);
    for (int p = 0; p < kProducers; ++p)
      capstan::fork_io([&, p] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(p));
        for (long i = 1; i <= kItems; ++i) {
          std::unique_lock<capstan::mutex> lk(m);
          while (q.size() >= kCapacity) {
            if (rng() % 4 == 0) {
              if (not_full.wait_for(lk, std::chrono::microseconds(rng() % 50)) == std::cv_status::timeout)
                ++timeouts;
            } else {
              not_full.wait(lk);
            }
          }
          q.push_back(i);
          produced += i;
          bool notify_inside = rng() % 2;
          if (notify_inside) not_empty.notify_one();
          lk.unlock();
          if (!notify_inside) not_empty.notify_one();
          stress::maybe_yield(rng, 3);
        }
        {
          std::lock_guard<capstan::mutex> g(m);
          --producers_left;
        }
        not_empty.notify_all();
        wg.done();
      });
    for (int c = 0; c < kConsumers; ++c)
      capstan::fork_io([&, c] {
        std::mt19937_64 rng(stress::seed() + 100 + static_cast<std::uint64_t>(c));
        for (;;) {
          std::unique_lock<capstan::mutex> lk(m);
          while (q.empty() && producers_left > 0) {
            if (rng() % 4 == 0) {
              if (!not_empty.wait_for(lk, std::chrono::microseconds(rng() % 50),
                                      [&] { return !q.empty() || producers_left == 0; }))
                ++timeouts;
            } else {
              not_empty.wait(lk);
            }
          }
          if (q.empty()) break;
          consumed += q.front();
          q.pop_front();
          lk.unlock();
          not_full.notify_one();
          stress::maybe_yield(rng, 3);
        }
        wg.done();
      });
    // Bystanders: block on m or on a condition variable, get killed.
    std::mt19937_64 rng(stress::seed() + 999);
    std::atomic<bool> stop{false};
    capstan::wait_group killer_done(1);
    capstan::fork_io([&] {
      while (!stop.load()) {
        bool locker = rng() % 2;
        capstan::thread_id t = capstan::fork_io([&, locker] {
          if (locker) {
            for (;;) {
              std::lock_guard<capstan::mutex> g(m);
              capstan::yield();
            }
          } else {
            std::unique_lock<capstan::mutex> lk(m);
            for (;;) idle.wait(lk);  // re-takes m on every notify and at the kill
          }
        });
        for (int k = static_cast<int>(rng() % 20); k > 0; --k) capstan::yield();
        if (rng() % 2) idle.notify_one();
        capstan::kill_thread(t);
        ++kills;
        // It unwinds, re-taking m on its way out of a wait: let it finish
        // before the primitives it uses can go out of scope.
        while (capstan::state_of(t) == capstan::thread_state::running ||
               capstan::state_of(t) == capstan::thread_state::blocked)
          capstan::yield();
      }
      killer_done.done();
    });
    wg.wait();
    stop = true;
    killer_done.wait();
  });
  EXPECT_EQ(consumed.load(), produced.load());
  EXPECT_EQ(produced.load(), kProducers * kItems * (kItems + 1) / 2);
  EXPECT_GT(kills.load(), 0);
}

// A million condition-variable waits (over all threads) without a
// predicate; each wake-up must consume a ticket handed out with exactly one
// notify_one to a waiter known to be queued (counted under the mutex).  A
// lost notify leaves a waiter parked for good: with all eight lost the
// notifiers find nobody waiting and spin (watchdog).  CV waits with a
// std::unique_lock<M>.
template <class CV, class M>
void million_waits(unsigned caps) {
  stress::Watchdog dog(std::chrono::seconds(120), "sync spurious wake-ups");
  constexpr int kWaiters = 8;
  const long kWaits = 1000000 / stress::kScale;
  long spurious = 0, woken = 0, last_waiting = 0;
  capstan::run(opts(caps), [&] {
    M m;
    CV cv;
    int waiting = 0;  // guarded by m: queued, not yet given a ticket
    long tickets = 0, sent = 0;
    bool stop = false;
    capstan::wait_group wg(kWaiters);
    for (int i = 0; i < kWaiters; ++i)
      capstan::fork_io([&] {
        {
          std::unique_lock<M> lk(m);
          while (!stop) {
            ++waiting;
            cv.wait(lk);
            if (tickets == 0) ++spurious; else --tickets;
            ++woken;
          }
        }
        wg.done();  // after the unlock: once all are done, m goes out of scope
      });
    auto notifier = [&](unsigned seed) {
      std::mt19937_64 rng(stress::seed() + seed);
      for (;;) {
        {
          std::unique_lock<M> lk(m);
          if (sent >= kWaits) return;
          if (waiting > 0) {
            --waiting;
            ++tickets;
            ++sent;
            if (rng() % 2) {
              cv.notify_one();
              continue;
            }
          } else {
            lk.unlock();
            capstan::yield();
            continue;
          }
        }
        cv.notify_one();
        stress::maybe_yield(rng, 8);
      }
    };
    capstan::wait_group notifiers(2);
    for (unsigned s = 0; s < 2; ++s) capstan::fork_io([&, s] { notifier(s); notifiers.done(); });
    notifiers.wait();
    {
      std::lock_guard<M> g(m);
      stop = true;
      tickets += waiting;
      last_waiting = waiting;
      waiting = 0;
    }
    cv.notify_all();
    wg.wait();
    EXPECT_EQ(tickets, 0);
  });
  EXPECT_EQ(spurious, 0);
  EXPECT_EQ(woken, kWaits + last_waiting);
}

TEST_P(SyncStress, AMillionWaitsAndNoSpuriousWakeUp) {
  million_waits<capstan::condition_variable, capstan::mutex>(GetParam());
}

// The same with condition_variable_any over a shared_mutex's exclusive lock.
TEST_P(SyncStress, AMillionAnyWaitsAndNoSpuriousWakeUp) {
  million_waits<capstan::condition_variable_any, capstan::shared_mutex>(GetParam());
}

// Timed waits that nobody notifies all end in a time-out.
TEST_P(SyncStress, UnnotifiedTimedWaitsAllTimeOut) {
  stress::Watchdog dog(std::chrono::seconds(120), "sync timed waits");
  const int kWaits = 4000 / static_cast<int>(stress::kScale);
  std::atomic<long> no_timeouts{0};
  capstan::run(opts(GetParam()), [&] {
    capstan::mutex m;
    capstan::condition_variable cv;
    capstan::counting_semaphore<> sem(0);
    capstan::wait_group wg(8);
    for (int t = 0; t < 8; ++t)
      capstan::fork_io([&, t] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(t));
        for (int i = 0; i < kWaits / 8; ++i) {
          if (i % 2) {
            std::unique_lock<capstan::mutex> lk(m);
            if (cv.wait_for(lk, std::chrono::microseconds(rng() % 30)) != std::cv_status::timeout)
              ++no_timeouts;
          } else if (sem.try_acquire_for(std::chrono::microseconds(rng() % 30))) {
            ++no_timeouts;
          }
        }
        wg.done();
      });
    wg.wait();
  });
  EXPECT_EQ(no_timeouts.load(), 0);
}

// Semaphore, barrier and wait_group together: workers in lock-step phases
// (barrier), each phase bounded by a semaphore, counted by a wait_group.
TEST_P(SyncStress, SemaphoreBarrierWaitGroupRounds) {
  stress::Watchdog dog(std::chrono::seconds(120), "sync barrier rounds");
  constexpr int kWorkers = 8, kUnits = 3;
  const int kPhases = 2000 / static_cast<int>(stress::kScale);
  std::atomic<int> inside{0}, peak{0}, phase_errors{0};
  std::atomic<long> completions{0};
  capstan::run(opts(GetParam()), [&] {
    capstan::counting_semaphore<kUnits> sem(kUnits);
    auto done = [&]() noexcept { completions.fetch_add(1, std::memory_order_relaxed); };
    capstan::barrier<decltype(done)> bar(kWorkers, done);
    capstan::wait_group wg(kWorkers);
    for (int w = 0; w < kWorkers; ++w)
      capstan::fork_io([&, w] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(w));
        for (int p = 0; p < kPhases; ++p) {
          sem.acquire();
          int now = inside.fetch_add(1) + 1;
          for (int pk = peak.load(); now > pk && !peak.compare_exchange_weak(pk, now);) {
          }
          stress::maybe_yield(rng, 2);
          inside.fetch_sub(1);
          sem.release();
          bar.arrive_and_wait();
          if (completions.load() < p + 1) ++phase_errors;
        }
        wg.done();
      });
    wg.wait();
  });
  EXPECT_LE(peak.load(), kUnits);
  EXPECT_EQ(phase_errors.load(), 0);
  EXPECT_EQ(completions.load(), kPhases);
}

}  // namespace
