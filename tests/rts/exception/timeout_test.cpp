// timeout_test.cpp - timeout(): results, time-outs of blocked and
// computing functions, nesting, and no late time-out (Note [Timeouts]).
#include <atomic>
#include <optional>
#include <string>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using Clock = std::chrono::steady_clock;

namespace {

class Timeout : public WithCaps {};

TEST_P(Timeout, ResultWhenInTime) {
  run([] {
    EXPECT_EQ(timeout(1s, [] { return 42; }), std::optional<int>(42));
    EXPECT_TRUE(timeout(1s, [] {}));
    EXPECT_FALSE(timeout(0s, [] { return 1; }).has_value());
    EXPECT_THROW(timeout(1s, []() -> int { throw std::runtime_error("x"); }), std::runtime_error);
    // A function returning a reference yields a copy of the referent.
    std::string name = "capstan";
    std::optional<std::string> copy = timeout(1s, [&]() -> const std::string& { return name; });
    name = "changed";
    EXPECT_EQ(copy, std::optional<std::string>("capstan"));
  });
}

TEST_P(Timeout, InterruptsABlockedTake) {
  run([] {
    mvar<int> never;
    auto t0 = Clock::now();
    EXPECT_FALSE(timeout(20ms, [&] { return never.take(); }).has_value());
    EXPECT_GE(Clock::now() - t0, 20ms);
    EXPECT_EQ(never.waiting(), 0u);
    EXPECT_FALSE(timeout(10ms, [] { sleep_for(10s); }));
  });
}

// A timeout begun inside a destructor that an exception is running (a
// flush on the error path) times out: its own catch lies inside the
// destructor, so its time-out can be raised there (Note [Timeouts begun
// while unwinding] in rts/io/timeouts.cpp).  It used to wait for its
// function for ever.  A kill in the same place is still held back (raising
// it would leave the destructor: std::terminate).
TEST_P(Timeout, InsideADestructorRunByAnException) {
  run([] {
    mvar<int> never;
    std::optional<int> got = 7;
    std::chrono::nanoseconds took{};
    struct flush {
      mvar<int>& never;
      std::optional<int>& got;
      std::chrono::nanoseconds& took;
      ~flush() {
        auto t0 = Clock::now();
        got = timeout(20ms, [&] { return never.take(); });
        took = Clock::now() - t0;
      }
    };
    try {
      flush f{never, got, took};
      throw std::runtime_error("the error path");
    } catch (const std::runtime_error&) {
    }
    EXPECT_FALSE(got.has_value());
    EXPECT_GE(took, 20ms);
    EXPECT_LT(took, 5s);
    EXPECT_EQ(never.waiting(), 0u);
    // Nested timeouts inside one: the inner one fires.
    bool inner_fired = false;
    struct nested {
      bool& inner_fired;
      ~nested() {
        mvar<int> m;
        inner_fired = !timeout(1s, [&] { return timeout(10ms, [&] { return m.take(); }).has_value(); })
                           .value_or(true);
      }
    };
    try {
      nested n{inner_fired};
      throw std::runtime_error("again");
    } catch (const std::runtime_error&) {
    }
    EXPECT_TRUE(inner_fired);
  });
}

TEST_P(Timeout, InterruptsAComputation) {
  run(capstan_test::opts(caps(), 2ms), [] {
    std::atomic<bool> stop{false};
    auto r = timeout(20ms, [&] {
      while (!stop.load()) yield_point();
      return 1;
    });
    EXPECT_FALSE(r.has_value());
  });
}

// A computation that passes safe points only through yield() (or
// sleep_for(0)) is interrupted too, with or without another thread to
// switch to: yield() answers the timeslice expiry as a safe point does.
// (It cleared the expiry without looking at the thread's timeouts, and the
// timeout never fired.)
TEST_P(Timeout, InterruptsALoopOfYields) {
  for (bool company : {false, true}) {
    // Outlives the run: the company thread may read it after main's
    // lambda has returned, until shutdown kills it at a yield (on main's
    // stack, where shutdown's own frames then were: TSan saw the race).
    std::atomic<bool> stop{false};
    run(capstan_test::opts(caps(), 2ms), [company, &stop] {
      if (company) fork_io([&stop] {
        while (!stop.load()) yield();
      });
      auto t0 = Clock::now();
      auto r = timeout(10ms, [&] {
        while (Clock::now() - t0 < 5s) yield();
        return 1;
      });
      stop = true;
      EXPECT_FALSE(r.has_value()) << "company " << company;
      EXPECT_LT(Clock::now() - t0, 2s) << "company " << company;
    });
  }
}

// -C0 (a switch at every safe point) still preempts: a thread whose
// switch-in flag was used up at a safe point with nobody else to run is
// told again at the next tick, so a thread forked later runs, and a
// timeout around a computation fires.  (With -C0 the ticker used to
// expire no timeslice at all.)
TEST_P(Timeout, MinusC0StillPreemptsAndTimesOut) {
  run(capstan_test::opts(caps(), 0ms), [] {
    auto t0 = Clock::now();
    auto r = timeout(10ms, [&] {
      while (Clock::now() - t0 < 5s) yield_point();
      return 1;
    });
    EXPECT_FALSE(r.has_value());
    EXPECT_LT(Clock::now() - t0, 2s);
    // At -N1 the forked thread can run only if main is preempted.
    std::atomic<bool> ran{false};
    fork_io([&] { ran = true; });
    auto t1 = Clock::now();
    while (!ran.load() && Clock::now() - t1 < 5s) yield_point();
    EXPECT_TRUE(ran.load());
    EXPECT_LT(Clock::now() - t1, 2s);
  });
}

TEST_P(Timeout, Nested) {
  run([] {
    mvar<int> never;
    // The inner one fires first: the outer sees the inner's nullopt.
    auto outer = timeout(10s, [&] { return timeout(10ms, [&] { return never.take(); }); });
    ASSERT_TRUE(outer.has_value());
    EXPECT_FALSE(outer->has_value());
    // The outer one fires first: it passes through the inner timeout.
    bool inner_returned = false;
    auto o2 = timeout(10ms, [&] {
      auto r = timeout(10s, [&] { return never.take(); });
      inner_returned = true;
      return r;
    });
    EXPECT_FALSE(o2.has_value());
    EXPECT_FALSE(inner_returned);
  });
}

// A timeout that ended in time never fires later, not even once its
// deadline has passed.
TEST_P(Timeout, NoLateTimeOut) {
  run([] {
    // Each take is served by a thread forked just before it: no take comes
    // near the limit, even under a sanitizer's slowdown on a loaded machine.
    constexpr auto kLimit = 500ms;
    mvar<int> box;
    Clock::time_point last_start = Clock::now();
    for (int i = 0; i < 200; ++i) {
      fork_io([&box, i] { box.put(i); });  // i by value: the loop moves on
      last_start = Clock::now();
      EXPECT_EQ(timeout(kLimit, [&] { return box.take(); }), std::optional<int>(i));
    }
    // Every deadline has passed by the end of this sleep: a time-out that
    // outlived its timeout() would land in it.
    EXPECT_NO_THROW(sleep_until(last_start + kLimit + 20ms));
  });
}

// Many timeouts around instant work, in a loop: cheap, and nothing leaks.
TEST_P(Timeout, ManyInstantTimeouts) {
  run([] {
    long sum = 0;
    for (int i = 0; i < 100000; ++i) sum += *timeout(60s, [i] { return i; });
    EXPECT_EQ(sum, 100000L * 99999 / 2);
  });
}

CAPSTAN_INSTANTIATE_CAPS(Timeout);

}  // namespace
