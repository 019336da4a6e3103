// duration_test.cpp - the timed calls with durations and time points that
// do not fit in nanoseconds (detail/duration.hpp): duration::max(), the
// usual "no time-out", waits as long as the runtime can; time_point::min()
// and other past deadlines never wait; negative durations never wait.
// Before, duration_cast<nanoseconds> and t - Clock::now() overflowed
// (undefined behaviour) and such calls returned at once, never, or crashed.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <mutex>

#include "capstan_test.hpp"

using namespace std::chrono;
using namespace std::chrono_literals;
using capstan::detail::kMaxWaitNs;
using capstan::detail::ns_until;
using capstan::detail::to_ns;
using capstan_test::green_wait_until;

namespace {

TEST(Duration, ToNsSaturatesAndTruncatesLikeDurationCast) {
  EXPECT_EQ(to_ns(1500ms), 1'500'000'000);
  EXPECT_EQ(to_ns(-3us), -3000);
  EXPECT_EQ(to_ns(duration<long long, std::pico>(1999)), 1);   // truncated toward zero
  EXPECT_EQ(to_ns(duration<long long, std::pico>(-1999)), -1);
  EXPECT_EQ(to_ns(hours::max()), kMaxWaitNs);
  EXPECT_EQ(to_ns(hours::min()), -kMaxWaitNs);
  EXPECT_EQ(to_ns(seconds::max()), kMaxWaitNs);
  EXPECT_EQ(to_ns(nanoseconds::max()), kMaxWaitNs);
  EXPECT_EQ(to_ns(nanoseconds::min()), -kMaxWaitNs);
  EXPECT_EQ(to_ns(duration<double>(0.25)), 250'000'000);
  EXPECT_EQ(to_ns(duration<double>(std::numeric_limits<double>::infinity())), kMaxWaitNs);
  EXPECT_EQ(to_ns(duration<double>(-std::numeric_limits<double>::infinity())), -kMaxWaitNs);
  EXPECT_EQ(to_ns(duration<double>(std::nan(""))), 0);
  EXPECT_EQ(to_ns(duration<unsigned long long>(ULLONG_MAX)), kMaxWaitNs);
  // Floating counts come out as duration_cast computes them.
  EXPECT_EQ(to_ns(duration<double, std::milli>(0.3)),
            duration_cast<nanoseconds>(duration<double, std::milli>(0.3)).count());
  EXPECT_EQ(to_ns(duration<float>(1.5f)), 1'500'000'000);
}

TEST(Duration, NsUntilSaturatesBothWays) {
  EXPECT_EQ(ns_until(steady_clock::time_point::max()), kMaxWaitNs);
  EXPECT_EQ(ns_until(steady_clock::time_point::min()), -kMaxWaitNs);
  EXPECT_EQ(ns_until(system_clock::time_point::min()), -kMaxWaitNs);
  EXPECT_GT(ns_until(system_clock::time_point::max()), 50LL * 365 * 24 * 3600 * 1'000'000'000);
  long long in_a_second = ns_until(steady_clock::now() + 1s);
  EXPECT_GT(in_a_second, 900'000'000);
  EXPECT_LE(in_a_second, 1'000'000'000);
  EXPECT_LT(ns_until(steady_clock::now() - 1s), 0);
}

using capstan_test::WithCaps;
class LongWaits : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(LongWaits);

bool blocked(capstan::thread_id t) { return capstan::state_of(t) == capstan::thread_state::blocked; }
// ended: t has finished, normally or killed (its destructors have run).
bool ended(capstan::thread_id t) {
  auto s = capstan::state_of(t);
  return s == capstan::thread_state::finished || s == capstan::thread_state::died;
}

// Each "for ever" wait blocks (it neither returns at once nor crashes) and
// ends normally when what it waits for comes.
TEST_P(LongWaits, DurationMaxWaitsForWhatItWaitsFor) {
  run([] {
    {
      capstan::counting_semaphore<> sem(0);
      std::atomic<bool> got{false};
      auto t = capstan::fork_io([&] { got = sem.try_acquire_for(hours::max()); });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t); }));
      sem.release();
      ASSERT_TRUE(green_wait_until([&] { return got.load(); }));
    }
    {
      capstan::chan<int> c;
      std::atomic<int> got{0};
      auto t = capstan::fork_io([&] { got = c.read_for(hours::max()).value_or(-1); });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t); }));
      c.write(7);
      ASSERT_TRUE(green_wait_until([&] { return got.load() == 7; }));
    }
    {
      capstan::mvar<int> m;
      std::atomic<int> got{0};
      auto t = capstan::fork_io([&] { got = m.try_take_until(steady_clock::time_point::max()).value_or(-1); });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t); }));
      m.put(9);
      ASSERT_TRUE(green_wait_until([&] { return got.load() == 9; }));
    }
    {
      capstan::timed_mutex mu;
      mu.lock();
      std::atomic<int> got{0};
      auto t = capstan::fork_io([&] {
        got = mu.try_lock_for(hours::max()) ? 1 : -1;
        if (got == 1) mu.unlock();
      });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t); }));
      mu.unlock();
      ASSERT_TRUE(green_wait_until([&] { return got.load() == 1; }));
      // wait for t: it unlocks mu after setting got, and mu dies with the block
      ASSERT_TRUE(green_wait_until([&] { return ended(t); }));
    }
    {
      capstan::mutex mu;
      capstan::condition_variable cv;
      bool ready = false;
      std::atomic<int> got{0};
      auto t = capstan::fork_io([&] {
        std::unique_lock<capstan::mutex> lk(mu);
        got = cv.wait_for(lk, hours::max(), [&] { return ready; }) ? 1 : -1;
      });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t); }));
      {
        std::lock_guard<capstan::mutex> g(mu);
        ready = true;
      }
      cv.notify_all();
      ASSERT_TRUE(green_wait_until([&] { return got.load() == 1; }));
      // wait for t: it unlocks mu after setting got, and mu dies with the block
      ASSERT_TRUE(green_wait_until([&] { return ended(t); }));
    }
    {
      int p[2];
      ASSERT_EQ(::pipe(p), 0);
      std::atomic<int> got{0};
      auto t = capstan::fork_io([&] { got = capstan::wait_readable_for(p[0], hours::max()) ? 1 : -1; });
      ASSERT_TRUE(green_wait_until([&] { return blocked(t); }));
      ASSERT_EQ(::write(p[1], "x", 1), 1);
      ASSERT_TRUE(green_wait_until([&] { return got.load() == 1; }));
      ::close(p[0]);
      ::close(p[1]);
    }
    {
      // sleep_for(hours::max()) sleeps: still blocked after 20 ms; killed.
      auto t = capstan::fork_io([] { capstan::sleep_for(hours::max()); });
      // Once t has run (a t not yet started after 20 ms, on a loaded
      // machine, said `running`): blocked, or finished if it returned.
      ASSERT_TRUE(green_wait_until([&] { return capstan::state_of(t) != capstan::thread_state::running; }));
      capstan::sleep_for(20ms);
      EXPECT_TRUE(blocked(t)) << "sleep_for(hours::max()) returned";
      capstan::kill_thread(t);
    }
    // timeout(hours::max(), f) runs f and returns its result.
    auto r = capstan::timeout(hours::max(), [] {
      capstan::sleep_for(5ms);
      return 3;
    });
    ASSERT_TRUE(r.has_value()) << "a for-ever timeout expired";
    EXPECT_EQ(*r, 3);
    auto year = capstan::timeout(hours(24 * 365 * 1000), [] { return 4; });
    EXPECT_EQ(year.value_or(-1), 4);
  });
}

// Past deadlines and negative durations never wait.
TEST_P(LongWaits, PastDeadlinesAndNegativeDurationsDoNotWait) {
  run([] {
    auto start = steady_clock::now();
    capstan::sleep_until(steady_clock::time_point::min());
    capstan::sleep_for(hours::min());
    capstan::sleep_for(-5ms);
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    EXPECT_FALSE(capstan::wait_readable_for(p[0], -5ms));
    EXPECT_FALSE(capstan::wait_readable_for(p[0], hours::min()));
    EXPECT_TRUE(capstan::wait_writable_for(p[1], -1s)) << "a writable pipe reads as not writable";
    ::close(p[0]);
    ::close(p[1]);
    capstan::counting_semaphore<> sem(0);
    EXPECT_FALSE(sem.try_acquire_until(steady_clock::time_point::min()));
    capstan::mvar<int> m;
    EXPECT_FALSE(m.try_take_until(system_clock::time_point::min()).has_value());
    capstan::chan<int> c;
    EXPECT_FALSE(c.read_for(hours::min()).has_value());
    EXPECT_FALSE(capstan::timeout(hours::min(), [] { return 1; }).has_value());
    EXPECT_LT(steady_clock::now() - start, 5s) << "a past deadline waited";
  });
}

}  // namespace
