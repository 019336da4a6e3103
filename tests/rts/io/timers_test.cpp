// timers_test.cpp - the IO manager's timers and their cancellation (Note
// [Timer heap], Note [Cancelling a timer] in rts/io/timers.cpp): a timer
// whose wait ended early leaves the heap at once, memory follows live
// timers, and a cancel racing an expiry yields exactly one of the two and
// never ends a later wait.
//
// io_timers() is exact once the IO thread has handled every message the
// test pushed: settle() sleeps, and a sleep's request is handled after
// everything the same thread pushed before it (the queue is FIFO per
// pusher), and leaves the heap before the sleeper is woken.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"
#include "io/io_manager.hpp"
#include "parked.hpp"

namespace {

using namespace capstan;
using namespace std::chrono_literals;
using capstan::rts::io_parked;
using capstan::rts::io_timers;
using capstan_test::kScale;
using capstan_test::parked_drains;
using capstan_test::WithCaps;

void settle() { sleep_for(1ms); }


// resident_bytes: the process's resident set, from /proc/self/statm.
long resident_bytes() {
  std::ifstream f("/proc/self/statm");
  long size = 0, resident = 0;
  f >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

constexpr long kRssBound = 16L << 20;  // growth allowed over a loop: 16 MiB

// expect_flat checks the resident set grew less than kRssBound since
// `before`.  Not under the sanitizers: ASan's quarantine holds freed memory
// back on purpose, and TSan's shadow grows with the addresses touched.
void expect_flat(long before) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)before;
#else
  EXPECT_LT(resident_bytes() - before, kRssBound);
#endif
}

class Timers : public WithCaps {};
class TimersConcurrency : public WithCaps {};

// ---------------------------------------------------------------- unit

// A take_for served before its deadline takes its timer out of the heap.
TEST_P(Timers, SatisfiedTakeForLeavesNoTimer) {
  run([] {
    mvar<int> m, got;
    fork_io([&] { got.put(*m.take_for(60s)); });
    // (The IO thread updates the two counts one after the other.)
    ASSERT_TRUE(capstan_test::green_wait_until([] { return io_timers() == 1 && io_parked() == 1; }));
    m.put(7);
    EXPECT_EQ(got.take(), 7);
    settle();
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
  });
}

// A timeout() whose function blocked and then finished in time takes its
// timer out of the heap.
TEST_P(Timers, TimeoutEndedInTimeLeavesNoTimer) {
  run([] {
    mvar<int> m, got;
    fork_io([&] { got.put(*timeout(60s, [&] { return m.take(); })); });
    ASSERT_TRUE(capstan_test::green_wait_until([] { return io_timers() == 1; }));
    m.put(8);
    EXPECT_EQ(got.take(), 8);
    settle();
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
  });
}

// Nested timeouts around a wait: both timers go when the outer one ends.
TEST_P(Timers, NestedTimeoutsLeaveNoTimer) {
  run([] {
    mvar<int> m, got;
    fork_io([&] {
      auto r = timeout(60s, [&] { return timeout(50s, [&] { return m.take(); }); });
      got.put(**r);
    });
    ASSERT_TRUE(capstan_test::green_wait_until([] { return io_timers() == 2; }));
    m.put(9);
    EXPECT_EQ(got.take(), 9);
    settle();
    EXPECT_EQ(io_timers(), 0u);
  });
}

// A sleeper killed in its sleep leaves no timer behind.
TEST_P(Timers, KilledSleeperLeavesNoTimer) {
  run([] {
    mvar<int> ended;
    thread_id t = fork_io([&] {
      try {
        sleep_for(60s);
      } catch (...) {
        ended.put(1);
        throw;
      }
    });
    ASSERT_TRUE(capstan_test::green_wait_until([] { return io_timers() == 1; }));
    kill_thread(t);
    EXPECT_EQ(ended.take(), 1);
    settle();
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
  });
}

// A thread killed in take_for, and one killed inside timeout(), leave no
// timer behind.
TEST_P(Timers, KilledTimedWaitersLeaveNoTimer) {
  run([] {
    mvar<int> never, ended;
    thread_id a = fork_io([&] {
      try {
        (void)never.take_for(60s);
      } catch (...) {
        ended.put(1);
        throw;
      }
    });
    thread_id b = fork_io([&] {
      try {
        (void)timeout(60s, [&] { return never.take(); });
      } catch (...) {
        ended.put(2);
        throw;
      }
    });
    ASSERT_TRUE(capstan_test::green_wait_until([] { return io_timers() == 2; }));
    kill_thread(a);
    kill_thread(b);
    int sum = ended.take() + ended.take();
    EXPECT_EQ(sum, 3);
    settle();
    EXPECT_EQ(io_timers(), 0u);
  });
}

// Timers that fired are gone too (the forget path: no cancel message).
TEST_P(Timers, ExpiredTimersLeave) {
  run([] {
    mvar<int> never;
    EXPECT_FALSE(never.take_for(1ms).has_value());
    EXPECT_FALSE(timeout(1ms, [&] { return never.take(); }).has_value());
    settle();
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
  });
}

// Millions of 60 s timeouts around work that does not block register
// nothing, so memory stays flat.
TEST_P(Timers, QuickTimeoutsKeepMemoryFlat) {
  run([] {
    const long kRounds = 10'000'000L / kScale;
    long before = resident_bytes();
    long sum = 0;
    for (long i = 0; i < kRounds; ++i) sum += *timeout(60s, [i] { return i & 1; });
    EXPECT_EQ(sum, kRounds / 2);
    EXPECT_EQ(io_timers(), 0u);
    expect_flat(before);
  });
}

// ping_pong runs `rounds` rounds in which the caller puts to req and then
// waits for resp with `wait` (which must return the value sent), a partner
// thread answering each.  At -N1 the caller parks in every round (the
// partner runs only then), so every round starts a timer.  Returns the
// most timers the partner saw in the heap at once.
template <class Wait>
std::size_t ping_pong(long rounds, Wait wait) {
  mvar<long> req, resp;
  mvar<int> done;
  std::size_t most = 0;  // the partner's; read after done.take()
  fork_io([&] {
    for (long i = 0; i < rounds; ++i) {
      resp.put(req.take());
      most = std::max(most, io_timers());
    }
    done.put(1);
  });
  for (long i = 0; i < rounds; ++i) {
    req.put(i);
    if (wait(resp) != i) {
      ADD_FAILURE() << "round " << i << ": wrong or no answer";
      break;
    }
  }
  done.take();
  return most;
}

// expect_few: the timers of a ping_pong were registered (so the loop tested
// something) but did not pile up: the heap held a small fraction of them.
// (Lag only: the IO thread handles each round's cancel a little later.)
void expect_few(std::size_t most, long rounds) {
  EXPECT_GT(most, 0u) << "no timer was ever registered";
  EXPECT_LT(most, static_cast<std::size_t>(rounds / 10)) << "timers piled up in the heap";
}

// Memory follows live timers: five million waits under 60 s timers, each
// ended by its answer at once, leave neither heap entries nor requests.
// (With timers left to their deadline this held ~200 bytes per round.)
TEST_P(Timers, SatisfiedTimeoutsKeepMemoryFlat) {
  run([] {
    const long kRounds = 5'000'000L / kScale;
    (void)ping_pong(1000, [](mvar<long>& m) { return *timeout(60s, [&] { return m.take(); }); });
    settle();
    long before = resident_bytes();
    std::size_t most = ping_pong(kRounds, [](mvar<long>& m) { return *timeout(60s, [&] { return m.take(); }); });
    settle();
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
    expect_few(most, kRounds);
    expect_flat(before);
  });
}

TEST_P(Timers, SatisfiedTakeForsKeepMemoryFlat) {
  run([] {
    const long kRounds = 5'000'000L / kScale;
    (void)ping_pong(1000, [](mvar<long>& m) { return *m.take_for(60s); });
    settle();
    long before = resident_bytes();
    std::size_t most = ping_pong(kRounds, [](mvar<long>& m) { return *m.take_for(60s); });
    settle();
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
    expect_few(most, kRounds);
    expect_flat(before);
  });
}

// ---------------------------------------------------------------- concurrency

// put_near_deadline waits (yielding) 0 to 1.5 ms, varying with the
// round, so that the put lands on either side of a 1 ms time-out, whose
// expiry comes at libuv's next millisecond tick.
void put_near_deadline(int round) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds((round * 37) % 1500);
  while (std::chrono::steady_clock::now() < until) yield();
}

// Every eighth round the putter leaves the first mvar alone, so that a
// time-out happens however the machine's load skews the race: either that
// round's first wait expires, or it takes a value left over from a round
// whose wait had already expired. A loaded machine once let every put of
// a 60-round run beat its 1 ms deadline.
bool skips_put(int round) { return round % 8 == 0; }

// late_expiry_rounds runs the race of the two tests below.  Each round a
// short wait on `first` (short_wait: its value, or nothing at the 1 ms
// deadline) races a put near that deadline; then a long wait on `second`
// (long_wait, 60 s) must be ended only by its own put.  Every value put
// is taken exactly once, and no timer or parked waiter is left.
template <class ShortWait, class LongWait>
void late_expiry_rounds(ShortWait short_wait, LongWait long_wait) {
  const int kRounds = 600 / kScale;
  mvar<int> first, second, done;
  long put_sum = 0, taken_sum = 0, timeouts = 0;
  fork_io([&] {
    for (int i = 1; i <= kRounds; ++i) {
      put_near_deadline(i);
      if (!skips_put(i) && first.try_put(i)) put_sum += i;
      second.put(i);
    }
    done.put(1);
  });
  for (int i = 1; i <= kRounds; ++i) {
    if (std::optional<int> v = short_wait(first)) taken_sum += *v;
    else ++timeouts;
    std::optional<int> v2 = long_wait(second);
    ASSERT_TRUE(v2.has_value()) << "round " << i << ": a stale timer ended the second wait";
    ASSERT_EQ(*v2, i);
  }
  done.take();
  while (auto v = first.try_take()) taken_sum += *v;
  EXPECT_EQ(taken_sum, put_sum);  // exactly once: never lost, never twice
  EXPECT_GT(timeouts, 0);
  settle();
  EXPECT_EQ(io_timers(), 0u);
  EXPECT_TRUE(parked_drains());
}

// A take_for's put races its expiry; the next wait, a long take_for on
// another mvar, must be ended only by its own put: an expiry that lost the
// race to the cancel (it was under way when the wait ended) finds a
// different token and does nothing (Note [Cancelling a timer]).
TEST_P(TimersConcurrency, LateExpiryNeverEndsALaterTakeFor) {
  run([] {
    late_expiry_rounds([](mvar<int>& m) { return m.take_for(1ms); },
                       [](mvar<int>& m) { return m.take_for(60s); });
  });
}

// The same race for timeout() frames: a late expiry of the first never
// interrupts the second, and nothing is raised after timeout() returned.
TEST_P(TimersConcurrency, LateExpiryNeverEndsALaterTimeout) {
  run([] {
    late_expiry_rounds([](mvar<int>& m) { return timeout(1ms, [&] { return m.take(); }); },
                       [](mvar<int>& m) { return timeout(60s, [&] { return m.take(); }); });
  });
}

// White-box: timers cancelled at random moments around their deadlines.
// Each expiry runs at most once; a timer cancelled long before its
// deadline never runs; afterwards the heap is empty.
void count_expiry(void* arg, std::uint64_t token) noexcept {
  static_cast<std::atomic<int>*>(arg)[token].fetch_add(1, std::memory_order_relaxed);
}

TEST_P(TimersConcurrency, CancelRacingExpiryIsOneOrTheOther) {
  run([] {
    const int kTimers = 20000 / kScale;
    auto fired = std::make_unique<std::atomic<int>[]>(2 * kTimers);
    std::vector<rts::TimerRef> racing;
    for (int i = 0; i < kTimers; ++i) {
      // Deadlines from 0 to 100 us, cancelled after 0 to a few yields.
      racing.push_back(rts::io_add_timeout(1 + (i % 100) * 1000, &count_expiry, fired.get(), i));
      if (i % 3 == 0) yield();
      if (i % 7 == 0) {
        for (rts::TimerRef t : racing) rts::io_cancel_timeout(t);
        racing.clear();
      }
    }
    for (rts::TimerRef t : racing) rts::io_cancel_timeout(t);
    // Long timers cancelled at once: they must never fire.
    for (int i = kTimers; i < 2 * kTimers; ++i)
      rts::io_cancel_timeout(rts::io_add_timeout(1'000'000'000, &count_expiry, fired.get(), i));
    settle();
    sleep_for(1ms);  // past every racing deadline
    long ran = 0;
    for (int i = 0; i < kTimers; ++i) {
      ASSERT_LE(fired[i].load(), 1) << "timer " << i << " fired twice";
      ran += fired[i].load();
    }
    for (int i = kTimers; i < 2 * kTimers; ++i) ASSERT_EQ(fired[i].load(), 0) << "a cancelled timer fired";
    EXPECT_EQ(io_timers(), 0u);
    EXPECT_TRUE(parked_drains());
    (void)ran;  // how many won the race is the machine's business
  });
}

INSTANTIATE_TEST_SUITE_P(Caps, Timers, ::testing::Values(1u, 2u), capstan_test::caps_name);
INSTANTIATE_TEST_SUITE_P(Caps, TimersConcurrency, ::testing::Values(1u, 2u),
                         capstan_test::caps_name);

}  // namespace
