// mvar_timeout_test.cpp - mvar<T>::take_for / try_take_until: time-outs end
// the wait, a put ends it with the value, never both (Note [Timed takes]).
#include <atomic>
#include <chrono>

#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using Clock = std::chrono::steady_clock;

namespace {

class MVarTimeout : public WithCaps {};

TEST_P(MVarTimeout, TimesOutOnAnEmptyMVar) {
  run([] {
    mvar<int> m;
    auto t0 = Clock::now();
    EXPECT_FALSE(m.take_for(20ms).has_value());
    auto waited = Clock::now() - t0;
    EXPECT_GE(waited, 20ms);
    EXPECT_LT(waited, 2s);
    EXPECT_EQ(m.waiting(), 0u) << "a timed-out taker left its waiter queued";
    // A put after the time-out is not taken by the departed taker.
    m.put(7);
    EXPECT_FALSE(m.is_empty());
    EXPECT_EQ(m.try_take(), 7);
  });
}

TEST_P(MVarTimeout, ValueArrivesBeforeTheTimeOut) {
  run([] {
    mvar<int> m;
    fork_io([&] {
      sleep_for(5ms);
      m.put(42);
    });
    auto t0 = Clock::now();
    EXPECT_EQ(m.take_for(10s), 42);
    EXPECT_LT(Clock::now() - t0, 5s);
  });
}

TEST_P(MVarTimeout, FullOrZeroTimeoutNeverBlocks) {
  run([] {
    mvar<int> m(3);
    EXPECT_EQ(m.take_for(0ms), 3);
    EXPECT_FALSE(m.take_for(0ms).has_value());
    EXPECT_FALSE(m.take_for(-5ms).has_value());
    EXPECT_FALSE(m.try_take_until(Clock::now() - 1s).has_value());
    m.put(4);
    EXPECT_EQ(m.try_take_until(Clock::now() + 1s), 4);
  });
}

// Timed and untimed takers share one FIFO: the oldest still waiting is served.
TEST_P(MVarTimeout, TimedTakersKeepTheirPlaceInTheQueue) {
  run([] {
    mvar<int> m;
    mvar<int> order;
    fork_io([&] { order.put(m.take_for(10s).value_or(-1)); });
    while (m.waiting() < 1) yield();
    fork_io([&] { order.put(m.take() + 100); });
    while (m.waiting() < 2) yield();
    m.put(1);
    m.put(2);
    EXPECT_EQ(order.take(), 1);
    EXPECT_EQ(order.take(), 102);
  });
}

// The put and the timer race on purpose: over many rounds, every value put
// is taken exactly once or is still in the mvar - never lost, never twice.
TEST_P(MVarTimeout, PutRacingTheTimerDeliversExactlyOnce) {
  run([] {
    const int kRounds = 2000 / capstan_test::kScale;
    long put_sum = 0, taken_sum = 0, timeouts = 0;
    mvar<int> m;
    mvar<int> done;
    fork_io([&] {
      for (int i = 1; i <= kRounds; ++i) {
        for (int k = 0; k < i % 7; ++k) yield();
        if (m.try_put(i)) put_sum += i;
      }
      done.put(1);
    });
    for (int i = 0; i < kRounds; ++i) {
      if (auto v = m.take_for(std::chrono::microseconds(i % 50))) taken_sum += *v;
      else ++timeouts;
    }
    done.take();
    while (auto v = m.try_take()) taken_sum += *v;
    EXPECT_EQ(taken_sum, put_sum);
    EXPECT_GT(timeouts, 0);
  });
}

// Shutdown kills a thread parked in take_for promptly (not at its time-out).
class MVarTimeoutShutdown : public capstan_test::RuntimeTest {};

TEST_F(MVarTimeoutShutdown, ParkedTimedTakerIsKilled) {
  auto t0 = Clock::now();
  run(capstan_test::opts(2), [] {
    static mvar<int> never;
    mvar<int> started;
    fork_io([&] {
      started.put(1);
      (void)never.take_for(60s);
    });
    started.take();
    yield();
  });
  EXPECT_LT(Clock::now() - t0, 30s);  // the fixture checks it was killed, not abandoned
}

CAPSTAN_INSTANTIATE_CAPS(MVarTimeout);

}  // namespace
