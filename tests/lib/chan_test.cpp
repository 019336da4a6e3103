// chan_test.cpp - chan<T>: FIFO order, blocked readers served in order,
// try_read / read_for, and a blocked read ended by an exception, a
// time-out, the chan's end or deadlock detection.
#include <cstdint>
#include <stdexcept>
#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using capstan_test::green_wait_until;
using capstan_test::kScale;

namespace {

class Chan : public WithCaps {};

struct flag_on_exit {
  std::atomic<bool>* f;
  ~flag_on_exit() { f->store(true); }
};

TEST_P(Chan, OneWriterOneReaderKeepOrder) {
  run([] {
    chan<int> c;
    const int n = 100000 / kScale;
    mvar<bool> ok;
    fork_io([&] {
      bool in_order = true;
      for (int i = 0; i < n; ++i) in_order &= c.read() == i;
      ok.put(in_order);
    });
    for (int i = 0; i < n; ++i) {
      c.write(i);
      if (i % 1000 == 0) yield();
    }
    EXPECT_TRUE(ok.take());
    EXPECT_EQ(c.size(), 0u);
  });
}

// Each writer's items come out in its order; every item exactly once.
TEST_P(Chan, ManyWritersManyReaders) {
  run([] {
    chan<std::pair<int, int>> c;
    const int writers = 4, readers = 3, per = 20000 / kScale;
    std::vector<std::atomic<int>> seen(writers * per);
    mvar<bool> reader_ok;
    for (int w = 0; w < writers; ++w)
      fork_io([&, w] {
        for (int i = 0; i < per; ++i) c.write({w, i});
      });
    std::atomic<int> remaining{writers * per};
    for (int r = 0; r < readers; ++r)
      fork_io([&] {
        std::vector<int> last(writers, -1);
        bool ok = true;
        while (remaining.fetch_sub(1) > 0) {
          auto [w, i] = c.read();
          ok &= i > last[w];  // per writer, increasing for each reader
          last[w] = i;
          seen[w * per + i].fetch_add(1);
        }
        reader_ok.put(ok);
      });
    for (int r = 0; r < readers; ++r) EXPECT_TRUE(reader_ok.take());
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  });
}

// Blocked readers are served in the order they blocked.
TEST_P(Chan, BlockedReadersServedInFifoOrder) {
  run([] {
    chan<int> c;
    const int k = 6;
    std::vector<mvar<int>> got(k);
    for (int r = 0; r < k; ++r) {
      fork_io([&, r] { got[r].put(c.read()); });
      ASSERT_TRUE(green_wait_until([&] { return c.waiting() == static_cast<std::size_t>(r + 1); }));
    }
    for (int i = 0; i < k; ++i) c.write(100 + i);
    for (int r = 0; r < k; ++r) EXPECT_EQ(got[r].take(), 100 + r);
  });
}

TEST_P(Chan, TryReadAndSize) {
  run([] {
    chan<std::unique_ptr<int>> c;  // move-only items
    EXPECT_FALSE(c.try_read().has_value());
    c.write(std::make_unique<int>(1));
    c.write(std::make_unique<int>(2));
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(**c.try_read(), 1);
    EXPECT_EQ(**c.try_read(), 2);
    EXPECT_FALSE(c.try_read().has_value());
    EXPECT_EQ(c.size(), 0u);
  });
}

// Items cross block boundaries, and blocks are freed and reused, without
// losing order (blocks hold 512 longs; rounds write and read up to 300).
TEST_P(Chan, StorageGrowsAndShrinksInOrder) {
  run([] {
    chan<long> c;
    long next_in = 0, next_out = 0;
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
      int w = static_cast<int>(rng() % 300), r = static_cast<int>(rng() % 300);
      for (int i = 0; i < w; ++i) c.write(next_in++);
      for (int i = 0; i < r; ++i) {
        std::optional<long> v = c.try_read();
        if (!v) break;
        ASSERT_EQ(*v, next_out++);
      }
      ASSERT_EQ(c.size(), static_cast<std::size_t>(next_in - next_out));
    }
    while (std::optional<long> v = c.try_read()) ASSERT_EQ(*v, next_out++);
    EXPECT_EQ(next_in, next_out);
  });
}

// Memory follows the chan's content, not its history: blocks are freed as
// they are emptied, but one spare (Note [Chan storage]).
TEST_P(Chan, MemoryFollowsContent) {
  run([] {
    chan<long> c;
    EXPECT_EQ(c.capacity(), 0u) << "an unused chan allocates nothing";
    const std::size_t n = 200000;
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < n; ++i) c.write(static_cast<long>(i));
      EXPECT_GE(c.capacity(), n) << "round " << round;
      EXPECT_LT(c.capacity(), n + n / 10) << "round " << round;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(c.read(), static_cast<long>(i));
        if (i == n / 2) {
          EXPECT_LT(c.capacity(), n / 2 + n / 10) << "half read, round " << round;
        }
      }
      EXPECT_LE(c.capacity(), 2 * 4096 / sizeof(long)) << "round " << round << ": emptied blocks were kept";
    }
    // A reader keeping up with a writer runs on two blocks at most.
    for (int i = 0; i < 100000; ++i) {
      c.write(i);
      ASSERT_EQ(c.read(), i);
      ASSERT_LE(c.capacity(), 2 * 4096 / sizeof(long)) << "item " << i;
    }
  });
}

// An impossible reserve is refused at once, allocating nothing: beyond
// max_size() std::length_error, beyond the machine's memory std::bad_alloc
// (it used to allocate block after block, holding the writers' lock,
// until the OOM killer came).  The chan stays usable.
TEST(ChanReserve, ImpossibleSizesAreRefusedAtOnce) {
  capstan::chan<int> c;
  EXPECT_THROW(c.reserve(SIZE_MAX), std::length_error);
  EXPECT_THROW(c.reserve(capstan::chan<int>::max_size() + 1), std::length_error);
  EXPECT_THROW(c.reserve(capstan::chan<int>::max_size()), std::bad_alloc);
  EXPECT_EQ(c.capacity(), 0u) << "an impossible reserve allocated";
  c.reserve(10);
  c.write(1);
  EXPECT_EQ(c.try_read().value_or(-1), 1);
}

// reserve: the next n writes allocate no block (capacity never grows),
// whatever reads come between them; room already there counts; reserved
// blocks left unused are freed with the chan (ASan's leak check).
TEST_P(Chan, ReserveMakesRoomForThatManyWritesWithoutAllocating) {
  run([] {
    constexpr std::size_t kItems = 4096 / sizeof(long);
    chan<long> c;
    c.write(-1);  // a block in use, partly filled
    const std::size_t n = 10 * kItems + 7;
    c.reserve(n);
    const std::size_t cap = c.capacity();
    EXPECT_GE(cap, n + 1);
    EXPECT_LT(cap, n + 1 + kItems) << "reserve took more than it needed";
    c.reserve(n / 2);
    EXPECT_EQ(c.capacity(), cap) << "reserve allocated although the room was there";
    long want = -1;
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t before = c.capacity();  // a read may have freed a block since
      c.write(static_cast<long>(i));
      ASSERT_LE(c.capacity(), before) << "write " << i << " allocated";
      if (i % 3 == 0) {
        ASSERT_EQ(c.read(), want++);  // reads recycle blocks meanwhile
      }
      if (i % (3 * kItems) == 0) {
        while (c.size() > 1) ASSERT_EQ(c.read(), want++);  // and in bursts
      }
    }
    ASSERT_LE(c.capacity(), cap);
    while (want < static_cast<long>(n)) ASSERT_EQ(c.read(), want++);
    chan<long> unused;
    unused.reserve(3 * kItems);
    EXPECT_GE(unused.capacity(), 3 * kItems);
  });
}

TEST_P(Chan, ReadForTimesOutAndLeavesNoWaiter) {
  run([] {
    chan<int> c;
    EXPECT_FALSE(c.read_for(2ms).has_value());
    EXPECT_FALSE(c.read_for(0ms).has_value());
    EXPECT_EQ(c.waiting(), 0u);
    c.write(5);
    EXPECT_EQ(c.read_for(1s), 5);
  });
}

// A write racing with a read_for's time-out: the item goes to the reader
// or stays in the chan, never both, never neither.
TEST_P(Chan, WriteRacingReadForNeverLosesTheItem) {
  run([] {
    chan<int> c;
    const int rounds = 2000 / kScale;
    int delivered = 0, kept = 0;
    for (int i = 0; i < rounds; ++i) {
      mvar<int> got;  // -1: timed out
      fork_io([&] {
        std::optional<int> v = c.read_for(std::chrono::microseconds(i % 50));
        got.put(v ? *v : -1);
      });
      if (i % 2) yield();
      c.write(i);
      int g = got.take();
      if (g == i) {
        ++delivered;
        ASSERT_FALSE(c.try_read().has_value());
      } else {
        ASSERT_EQ(g, -1);
        ASSERT_EQ(c.try_read(), i) << "the item was lost";
        ++kept;
      }
    }
    EXPECT_EQ(delivered + kept, rounds);
  });
}

// A killed blocked reader leaves the queue exactly once; the next item
// goes to the next reader.
TEST_P(Chan, KilledReaderLeavesTheQueue) {
  run([] {
    chan<int> c;
    std::atomic<bool> unwound{false};
    mvar<int> killed_got, other_got;
    thread_id a = fork_io([&] {
      try {
        flag_on_exit f{&unwound};
        killed_got.put(c.read());
      } catch (const thread_killed&) {
        killed_got.put(-1);
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return c.waiting() == 1; }));
    fork_io([&] { other_got.put(c.read()); });
    ASSERT_TRUE(green_wait_until([&] { return c.waiting() == 2; }));
    kill_thread(a);
    EXPECT_EQ(killed_got.take(), -1);
    EXPECT_TRUE(unwound.load());
    EXPECT_EQ(c.waiting(), 1u);
    c.write(42);
    EXPECT_EQ(other_got.take(), 42);
    c.write(43);
    EXPECT_EQ(c.try_read(), 43) << "a departed reader took an item";
  });
}

// A masked reader stays interruptible; an uninterruptibly masked one
// takes its item first and meets the exception when it unmasks.
TEST_P(Chan, MaskedReaders) {
  run([] {
    chan<int> c;
    mvar<int> r1;
    thread_id t1 = fork_io([&] {
      try {
        mask([&] { c.read(); });
        r1.put(0);
      } catch (const thread_killed&) {
        r1.put(1);
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return c.waiting() == 1; }));
    kill_thread(t1);
    EXPECT_EQ(r1.take(), 1);

    std::atomic<int> got{0};
    mvar<int> r2;
    thread_id t2 = fork_io([&] {
      try {
        uninterruptible_mask([&] { got.store(c.read()); });
        r2.put(0);
      } catch (const thread_killed&) {
        r2.put(1);
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return c.waiting() == 1; }));
    mvar<bool> kill_returned;
    thread_id killer = fork_io([&] {
      kill_thread(t2);
      kill_returned.put(true);
    });
    // The killer waits in throw_to: t2 is masked uninterruptibly.
    ASSERT_TRUE(green_wait_until([&] { return state_of(killer) == thread_state::blocked; }));
    EXPECT_FALSE(kill_returned.try_take().has_value());
    c.write(9);
    EXPECT_TRUE(kill_returned.take());
    EXPECT_EQ(r2.take(), 1);
    EXPECT_EQ(got.load(), 9);
  });
}

// Readers still blocked when the chan dies get blocked_indefinitely.
TEST_P(Chan, DestroyedChanOrphansItsReaders) {
  run([] {
    auto c = std::make_unique<chan<int>>();
    mvar<int> r;
    fork_io([&] {
      try {
        c->read();
        r.put(0);
      } catch (const blocked_indefinitely&) {
        r.put(1);
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return c->waiting() == 1; }));
    c.reset();
    EXPECT_EQ(r.take(), 1);
  });
}

// main returning kills readers still blocked (a blocked read is a
// shutdown checkpoint); they unwind and the run ends cleanly.
TEST_P(Chan, ShutdownKillsBlockedReaders) {
  std::atomic<int> unwound{0};
  run([&] {
    static chan<int> c;  // outlives the readers
    for (int i = 0; i < 5; ++i)
      fork_io([&] {
        struct count {
          std::atomic<int>* n;
          ~count() { n->fetch_add(1); }
        } k{&unwound};
        c.read();
      });
    ASSERT_TRUE(green_wait_until([&] { return c.waiting() == 5; }));
  });
  EXPECT_EQ(unwound.load(), 5);
}

// Deadlock detection sees a reader of a chan nobody can write to.
TEST_P(Chan, AbandonedReaderGetsBlockedIndefinitely) {
  options o = capstan_test::opts(caps());
  o.deadlock_detection = options::deadlock::force;  // sanitizers' own threads
  EXPECT_THROW(run(o, [] {
                 chan<int> c;
                 std::atomic<bool> other{false};
                 fork_io([&] {
                   try {
                     c.read();
                   } catch (const blocked_indefinitely&) {
                     other.store(true);
                   }
                 });
                 try {
                   c.read();
                 } catch (const blocked_indefinitely&) {
                   EXPECT_TRUE(green_wait_until([&] { return other.load(); }));
                   throw;
                 }
               }),
               blocked_indefinitely);
}

// A reader about to block races a writer on another core: each item is
// published just before or just after the reader announces it waits
// (Note [Chan readers waiting]).  The writer sends the next item only once
// the reader has the last, so a lost wake-up is not rescued by a later
// write: it shows as a read_for that times out with the item in the chan.
// Writers: a plain OS thread and, with two or more capabilities, a green
// thread on another capability.
TEST_P(Chan, AWriteRacingABlockingReadIsNeverLost) {
  run([this] {
    const int n = 20000 / kScale;
    for (int pass = 0; pass < (caps() > 1 ? 2 : 1); ++pass) {
      chan<int> c;
      std::atomic<int> acked{0};
      mvar<bool> writer_done;
      auto writer = [&](bool green) {
        std::mt19937 rng(static_cast<unsigned>(pass) + 11);
        for (int i = 0; i < n; ++i) {
          while (acked.load() != i)
            if (green) yield();
          for (unsigned k = rng() % 300; k != 0; --k) std::atomic_signal_fence(std::memory_order_seq_cst);
          c.write(i);
        }
      };
      std::thread os;
      if (pass == 0) os = std::thread(writer, false);
      else fork_on(1, [&] { writer(true); writer_done.put(true); });
      for (int i = 0; i < n; ++i) {
        std::optional<int> v = c.read_for(2s);
        ASSERT_EQ(v, i) << "item " << i << " lost: " << c.size() << " left in the chan";
        acked.store(i + 1);
      }
      if (pass == 0) os.join(); else writer_done.take();
      EXPECT_EQ(c.size(), 0u);
    }
  });
}

// Each of several writers sends one item and the reader destroys the chan
// the moment it has them all (an async group's shape): a writer that
// found a reader waiting is still serving after its item was read, and
// must not touch the chan then (Note [Chan lifetime]; ASan checks).
TEST_P(Chan, AReaderMayDestroyTheChanOnceItHasEveryItem) {
  run([this] {
    const int rounds = 3000 / kScale, writers = 3;
    for (int r = 0; r < rounds; ++r) {
      auto c = std::make_unique<chan<int>>();
      std::atomic<int> returned{0};
      std::vector<std::thread> os;
      for (int w = 0; w < writers; ++w) {
        auto write = [&, w] {
          c->write(w);
          returned.fetch_add(1);
        };
        if (w == 0) os.emplace_back(write);  // a plain OS thread: truly parallel
        else fork_on(static_cast<unsigned>(w), write);
      }
      int sum = 0;
      for (int w = 0; w < writers; ++w) sum += c->read();
      c.reset();
      EXPECT_EQ(sum, writers * (writers - 1) / 2);
      for (auto& t : os) t.join();
      ASSERT_TRUE(green_wait_until([&] { return returned.load() == writers; }));
    }
  });
}

// Plain OS threads may write and try_read; a blocking read is refused.
TEST_P(Chan, OsThreadsWriteButCannotBlock) {
  run([] {
    chan<int> c;
    bool refused = false;
    std::thread os([&] {
      try {
        c.read();
      } catch (const usage_error&) {
        refused = true;
      }
      for (int i = 0; i < 100; ++i) c.write(i);
    });
    for (int i = 0; i < 100; ++i) EXPECT_EQ(c.read(), i);
    os.join();
    EXPECT_TRUE(refused);
  });
}

}  // namespace

CAPSTAN_INSTANTIATE_CAPS(Chan);
