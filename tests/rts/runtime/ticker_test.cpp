// ticker_test.cpp - white-box tests of the timeslice ticker: it expires the
// timeslice of busy capabilities only, expires nothing at -C0, and
// Note [Stopping the ticker]: it parks when every capability is idle and
// comes back when one wakes.
//
// The first tests run a Ticker of their own over hand-made capabilities (no
// runtime running) and count its ticks through the peak-live sample it
// takes on every tick; the last ones run the real runtime, whose idle loop
// is the ticker's other half.  Nothing here measures time.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "capstan_test.hpp"
#include "capstan/mvar.hpp"
#include "runtime/runtime.hpp"
#include "runtime/ticker.hpp"
#include "stats/stats.hpp"
#include "white_box.hpp"

namespace {

using capstan::rts::Capability;
using capstan::rts::kTimesliceExpired;
using capstan::rts::rt;
using capstan::rts::Ticker;
using capstan_test::eventually;
using capstan_test::kScale;
using capstan_test::Rng;
using capstan_test::spin;
using capstan_test::thread_sleeps_on;
using std::chrono::microseconds;

bool expired(const Capability* c) {
  return (c->context_switch.load(std::memory_order_relaxed) & kTimesliceExpired) != 0;
}

// Two capabilities in rt, no runtime: caps[0] idle, caps[1] busy unless a
// test says otherwise.  An idle one is asleep in idle() (Hold::sleeping):
// one still looking for work keeps the ticker from parking (Note [Idle is
// not asleep] in rts/exception/deadlock.cpp, DeadlockTick::unsettled).
class TickerUnit : public ::testing::Test {
 protected:
  capstan_test::WhiteBoxRuntime runtime_;  // first: outlives the rest
  void SetUp() override {
    ASSERT_FALSE(capstan::rts::process.running.load());
    was_shutting_down_ = rt.shutting_down.exchange(false);  // a finished run leaves it set
    for (unsigned i = 0; i < 2; ++i) {
      caps_[i] = std::make_unique<Capability>();
      caps_[i]->no = i;
      rt.caps.push_back(caps_[i].get());
    }
    rt.n_caps = 2;
    idle()->idle.store(true);
    idle()->hold.store(capstan::rts::Hold::sleeping);
    rt.idle_word.store(1);
    rt.ticker_parked.store(0);
    rt.peak_live.store(0);
  }
  void TearDown() override {
    ticker_.stop();
    rt.caps.clear();
    rt.n_caps = 0;
    rt.idle_word.store(0);
    rt.shutting_down.store(was_shutting_down_);
  }
  Capability* idle() { return caps_[0].get(); }
  Capability* busy() { return caps_[1].get(); }
  // wait_ticks returns once the ticker has begun `n` more ticks (each tick
  // samples the live-thread peak first: we raise the live count and wait
  // for the sample), so the tick before the last has run in full.
  bool wait_ticks(int n) {
    for (int i = 0; i < n; ++i) {
      busy()->threads_created.add();
      std::uint64_t live = capstan::rts::live_threads();
      if (!eventually([&] { return rt.peak_live.load() >= live; })) return false;
    }
    return true;
  }
  Ticker ticker_;
  std::unique_ptr<Capability> caps_[2];
  bool was_shutting_down_ = false;
};

TEST_F(TickerUnit, ExpiresTheTimesliceOfBusyCapabilitiesOnly) {
  ticker_.start(microseconds(1000));
  for (int round = 0; round < 5; ++round) {
    busy()->context_switch.store(0);
    ASSERT_TRUE(eventually([&] { return expired(busy()); })) << "round " << round;
  }
  ASSERT_TRUE(wait_ticks(3));
  EXPECT_EQ(idle()->context_switch.load(), 0u) << "an idle capability's timeslice was expired";
}

// At -C0 switches expire slices themselves, and the ticker still does at
// every tick: a thread that used its flag up at a safe point with nothing
// else to run must be told again (Ticker::start).
TEST_F(TickerUnit, AtMinusC0TheTickerStillExpiresBusyCapabilities) {
  ticker_.start(microseconds(0));
  for (int round = 0; round < 3; ++round) {
    busy()->context_switch.store(0);
    ASSERT_TRUE(eventually([&] { return expired(busy()); })) << "round " << round;
  }
  ASSERT_TRUE(wait_ticks(3));
  EXPECT_EQ(idle()->context_switch.load(), 0u) << "an idle capability's timeslice was expired";
}

TEST_F(TickerUnit, ParksOnceEveryCapabilityIsIdle) {
  busy()->idle.store(true);
  busy()->hold.store(capstan::rts::Hold::sleeping);
  rt.idle_word.store(2);
  ticker_.start(microseconds(1000));
  // Asleep on the parked word, with no time-out: it ticks no more.
  ASSERT_TRUE(eventually([] { return thread_sleeps_on(&rt.ticker_parked); }));
  EXPECT_EQ(rt.ticker_parked.load(), 1u);
}

TEST_F(TickerUnit, DoesNotParkWhileOneCapabilityIsBusy) {
  ticker_.start(microseconds(1000));
  // Many ticks with one capability idle and one busy: it keeps ticking.
  ASSERT_TRUE(wait_ticks(10));
  EXPECT_FALSE(thread_sleeps_on(&rt.ticker_parked));
  EXPECT_EQ(rt.ticker_parked.load(), 0u);
}

TEST_F(TickerUnit, StopWakesAParkedTicker) {
  busy()->idle.store(true);
  busy()->hold.store(capstan::rts::Hold::sleeping);
  rt.idle_word.store(2);
  ticker_.start(microseconds(1000));
  ASSERT_TRUE(eventually([] { return thread_sleeps_on(&rt.ticker_parked); }));
  ticker_.stop();  // joins: a ticker that stayed parked would hang here
  EXPECT_FALSE(thread_sleeps_on(&rt.ticker_parked));
}

// --- with the runtime: the idle loop is the other half of the hand-shake ---

// Main blocks on an mvar, so every capability idles and the ticker parks;
// a plain OS thread then fills the mvar.  Main, awake and busy (a loop with
// no safe point), must see its timeslice expired: the ticker came back.
TEST(TickerRuntime, ParksWhenTheRuntimeIsIdleAndComesBackWhenWorkArrives) {
  capstan::mvar<int> box;
  std::atomic<bool> parked_seen{false}, failed{false}, alive{false};
  std::thread outside([&] {
    // rt exists only between run()'s start and end: read it only once main runs.
    if (!eventually([&] { return alive.load(); })) failed.store(true);
    bool parked = !failed.load() && eventually([] {
      return rt.n_idle(std::memory_order_seq_cst) == 2 && thread_sleeps_on(&rt.ticker_parked);  // -N2 below
    });
    parked_seen.store(parked);
    if (!parked) failed.store(true);
    EXPECT_TRUE(box.try_put(1));
  });
  capstan::run(capstan_test::opts(2, microseconds(1000)), [&] {
    alive.store(true);
    EXPECT_EQ(box.take(), 1);
    Capability* cap = capstan::rts::my_task()->cap;
    cap->context_switch.fetch_and(~kTimesliceExpired);
    EXPECT_TRUE(eventually([&] { return expired(cap) || failed.load(); }))
        << "the ticker did not come back for a busy capability";
    EXPECT_FALSE(failed.load());
  });
  outside.join();
  EXPECT_TRUE(parked_seen.load()) << "the ticker never parked while the runtime was idle";
}

// The same hand-shake, with the wake-up landing at random points of the
// ticker's decision to park (before, during, after): it is never lost.
TEST(TickerRuntime, AWakeUpRacingWithTheTickerParkingIsNeverLost) {
  const int rounds = 200 / kScale;
  capstan::mvar<int> box;
  std::atomic<int> ready{-1};
  std::atomic<bool> failed{false};
  std::thread outside([&] {
    Rng rng(41);
    for (int r = 0; r < rounds && !failed.load(); ++r) {
      if (!eventually([&] { return ready.load() == r || failed.load(); })) break;
      if (failed.load()) break;
      if (r % 4 == 0) eventually([] { return thread_sleeps_on(&rt.ticker_parked); });
      else spin(rng.below(4000000));  // lands before, around or after the park
      if (!box.try_put(r)) failed.store(true);
    }
  });
  capstan::run(capstan_test::opts(2, microseconds(1000)), [&] {
    for (int r = 0; r < rounds; ++r) {
      ready.store(r);
      if (box.take() != r) failed.store(true);
      Capability* cap = capstan::rts::my_task()->cap;
      cap->context_switch.fetch_and(~kTimesliceExpired);
      if (!eventually([&] { return expired(cap); })) {
        ADD_FAILURE() << "round " << r << ": the ticker stayed parked while main was busy";
        failed.store(true);
        break;
      }
    }
  });
  outside.join();
  EXPECT_FALSE(failed.load());
}

}  // namespace
