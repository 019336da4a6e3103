// mvar_test.cpp - MVar semantics: FIFO single wake-ups, direct hand-over,
// readers, try_ operations, orphaned waiters, calls from plain OS threads.
#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::WithCaps;

class MVar : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(MVar);

// Takers that block in order are served in that order, one per put, even
// when they live on different capabilities.
TEST_P(MVar, TakersAreServedFifoOnePerPut) {
  constexpr int kTakers = 12;
  std::vector<int> got(kTakers, -1);
  run([&] {
    capstan::mvar<int> m;
    capstan::mvar<int> done;
    for (int i = 0; i < kTakers; ++i) {
      capstan::fork_on(static_cast<unsigned>(i) % caps(), [&, i] {
        got[i] = m.take();
        done.put(i);
      });
      // Wait until taker i is queued before forking the next one.
      while (m.waiting() != static_cast<std::size_t>(i + 1)) capstan::yield();
    }
    for (int k = 0; k < kTakers; ++k) {
      m.put(k * 10);
      EXPECT_EQ(done.take(), k) << "put " << k << " woke the wrong taker";
      EXPECT_EQ(m.waiting(), static_cast<std::size_t>(kTakers - k - 1)) << "more than one woken";
    }
  });
  for (int i = 0; i < kTakers; ++i) EXPECT_EQ(got[i], i * 10);
}

TEST_P(MVar, PuttersBlockOnAFullMVarAndAreServedFifo) {
  std::vector<int> order;
  run([&] {
    capstan::mvar<int> m(0);
    capstan::mvar<int> done;
    for (int i = 1; i <= 5; ++i) {
      capstan::fork_io([&, i] {
        m.put(i);
        done.put(i);
      });
      while (m.waiting() != static_cast<std::size_t>(i)) capstan::yield();
    }
    for (int i = 0; i <= 5; ++i) order.push_back(m.take());
    for (int i = 0; i < 5; ++i) done.take();
    EXPECT_TRUE(m.is_empty());
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST_P(MVar, ReadersAtTheFrontAreAllServedThenTheFirstTaker) {
  std::atomic<int> readers_done{0};
  int taker_got = -1;
  run([&] {
    capstan::mvar<int> m;
    capstan::mvar<int> done;
    for (int i = 0; i < 3; ++i) {
      capstan::fork_io([&] {
        EXPECT_EQ(m.read(), 7);
        readers_done.fetch_add(1);
        done.put(0);
      });
      while (m.waiting() != static_cast<std::size_t>(i + 1)) capstan::yield();
    }
    capstan::fork_io([&] {
      taker_got = m.take();
      done.put(0);
    });
    while (m.waiting() != 4) capstan::yield();
    m.put(7);
    for (int i = 0; i < 4; ++i) done.take();
    EXPECT_TRUE(m.is_empty()) << "the taker did not take the value";
    EXPECT_EQ(m.try_read(), std::nullopt);
  });
  EXPECT_EQ(readers_done.load(), 3);
  EXPECT_EQ(taker_got, 7);
}

TEST_P(MVar, TryOperationsNeverBlock) {
  run([&] {
    capstan::mvar<std::unique_ptr<int>> m;
    EXPECT_FALSE(m.try_take().has_value());
    EXPECT_TRUE(m.try_put(std::make_unique<int>(1)));
    EXPECT_FALSE(m.try_put(std::make_unique<int>(2)));
    EXPECT_EQ(**m.try_take(), 1);
    EXPECT_TRUE(m.is_empty());
  });
}

TEST_P(MVar, ValuesCrossCapabilitiesExactlyOnce) {
  constexpr int kProducers = 4, kEach = 5000;
  long long sum = 0;
  run([&] {
    capstan::mvar<int> m;
    capstan::mvar<int> done;
    for (int p = 0; p < kProducers; ++p) {
      capstan::fork_on(static_cast<unsigned>(p), [&, p] {
        for (int i = 0; i < kEach; ++i) m.put(p * kEach + i);
        done.put(1);
      });
    }
    for (int i = 0; i < kProducers * kEach; ++i) sum += m.take();
    for (int p = 0; p < kProducers; ++p) done.take();
  });
  long long n = kProducers * kEach;
  EXPECT_EQ(sum, n * (n - 1) / 2);
}

TEST_P(MVar, DestroyingAnMVarWakesItsWaitersWithBlockedIndefinitely) {
  std::atomic<int> orphaned{0};
  run([&] {
    capstan::mvar<int> done;
    {
      capstan::mvar<int> doomed;
      for (int i = 0; i < 3; ++i) {
        capstan::fork_io([&] {
          try {
            doomed.take();
          } catch (const capstan::blocked_indefinitely&) {
            orphaned.fetch_add(1);
          }
          done.put(1);
        });
      }
      while (doomed.waiting() != 3) capstan::yield();
    }
    for (int i = 0; i < 3; ++i) done.take();
  });
  EXPECT_EQ(orphaned.load(), 3);
}

TEST_P(MVar, APlainOsThreadCanWakeAGreenThreadWithTryPut) {
  int got = 0;
  run([&] {
    capstan::mvar<int> m;
    std::thread foreign([&] {
      while (m.waiting() == 0) std::this_thread::yield();
      EXPECT_TRUE(m.try_put(42));
    });
    got = m.take();
    foreign.join();
  });
  EXPECT_EQ(got, 42);
}

// Killing a thread at shutdown never loses or duplicates a value: the kill
// (thread_killed at a runtime call) lands before an operation takes effect,
// never after it.  Values circulate through a ring of mvars; a worker
// records the value it holds between its take and its try_put, so after
// run() every value must be in exactly one mvar or one worker's hand.
TEST_P(MVar, AKilledThreadNeverLosesOrDuplicatesAValue) {
  constexpr int kBoxes = 8, kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<capstan::mvar<int>> boxes(kBoxes);
    std::vector<std::atomic<int>> held(kBoxes);
    for (auto& h : held) h.store(-1);
    std::atomic<long> moves{0};
    run([&] {
      for (int i = 0; i < kBoxes; i += 2) boxes[i].try_put(i);  // half full
      for (int w = 0; w < kBoxes; ++w) {
        capstan::fork_io([&, w] {
          for (;;) {
            int v = boxes[w].take();
            held[w].store(v);
            while (!boxes[(w + 1) % kBoxes].try_put(v)) capstan::yield();
            held[w].store(-1);
            moves.fetch_add(1);
          }
        });
      }
      while (moves.load() < 1000) capstan::yield();
    });  // every worker is killed somewhere in its loop
    std::vector<int> seen(kBoxes, 0);
    for (auto& b : boxes)
      if (auto v = b.try_take()) ++seen.at(static_cast<std::size_t>(*v));
    for (auto& h : held)
      if (h.load() >= 0) ++seen.at(static_cast<std::size_t>(h.load()));
    for (int v = 0; v < kBoxes; v += 2)
      ASSERT_EQ(seen[v], 1) << "value " << v << (seen[v] ? " duplicated" : " lost") << " in round "
                            << round;
  }
}

// A T whose move may throw (one with a user-declared destructor and a
// copying "move", say).  A take that refills the mvar from a queued putter
// moves the putter's value in; when that throws, the take does not happen:
// the mvar keeps its value and the putter stays queued.  It used to be
// left empty with the putter queued, and the next put wrote into the
// putter's T as if it were a taker's slot.
struct throwing_move {
  static inline int throw_at = 0;  // the throw_at-th move from now throws
  int v = 0;
  explicit throwing_move(int x) : v(x) {}
  throwing_move(const throwing_move& o) : v(o.v) {}
  throwing_move(throwing_move&& o) : v(o.v) {
    if (throw_at > 0 && --throw_at == 0) throw std::runtime_error("move");
  }
  throwing_move& operator=(const throwing_move&) = default;
  ~throwing_move() {}
};

TEST_P(MVar, ATakeWhoseRefillThrowsLeavesTheMVarAsItWas) {
  run([&] {
    capstan::mvar<throwing_move> m;
    m.put(throwing_move(1));
    bool putter_done = false;
    capstan::thread_id p = capstan::fork_io([&] {
      m.put(throwing_move(2));  // blocks: full
      putter_done = true;
    });
    while (m.waiting() == 0) capstan::yield();
    // The first move takes the value out; the second, the putter's in, throws.
    throwing_move::throw_at = 2;
    EXPECT_THROW(m.take(), std::runtime_error);
    throwing_move::throw_at = 2;
    EXPECT_THROW(m.try_take(), std::runtime_error);
    throwing_move::throw_at = 0;
    EXPECT_FALSE(m.is_empty());
    EXPECT_EQ(m.waiting(), 1u) << "the putter left the queue unserved";
    EXPECT_FALSE(putter_done);
    EXPECT_EQ(m.take().v, 1);  // refills from the putter now
    while (capstan::state_of(p) != capstan::thread_state::finished) capstan::yield();
    EXPECT_TRUE(putter_done);
    EXPECT_EQ(m.take().v, 2);
    EXPECT_TRUE(m.is_empty());
    EXPECT_EQ(m.waiting(), 0u);
  });
}

TEST(MVarOutsideRun, BlockingOutsideAGreenThreadIsAClearError) {
  capstan::mvar<int> m;
  try {
    m.take();
    FAIL() << "take on an empty mvar outside run returned";
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("capstan::mvar"), std::string::npos);
  }
  EXPECT_EQ(m.waiting(), 0u) << "the failed take left a waiter behind";
  EXPECT_TRUE(m.try_put(1));  // non-blocking calls work anywhere
  EXPECT_EQ(m.take(), 1);     // and a take that need not block
}

}  // namespace
