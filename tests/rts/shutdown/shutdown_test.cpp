// shutdown_test.cpp - what shutdown does with a thread that blocks in a
// destructor while it unwinds from thread_killed: woken by another thread,
// or abandoned once nothing can wake it (Note [Blocked while unwinding] in
// rts/shutdown/shutdown.cpp).
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include "capstan_test.hpp"
#include "io/io_manager.hpp"

extern "C" const char* __lsan_default_suppressions() {
  // see abandoned_thread_body and waits_for_fd_in_destructor
  return "leak:abandoned_thread_body\nleak:waits_for_fd_in_destructor\n";
}

namespace {

using capstan_test::WithCaps;

class Shutdown : public WithCaps {
 protected:
  // See abandon_one_among, below.
  template <class Block, class AllBlocked>
  void abandon_one_among(Block block, AllBlocked all_blocked);
};
CAPSTAN_INSTANTIATE_CAPS(Shutdown);

struct Counted {
  std::atomic<int>* n;
  ~Counted() { n->fetch_add(1); }
};

// Takes from an mvar in its destructor: run while the thread unwinds.
struct TakesWhenDestroyed {
  capstan::mvar<int>* m;
  std::atomic<int>* took;
  ~TakesWhenDestroyed() {
    m->take();
    took->fetch_add(1);
  }
};

// Puts into an mvar in its destructor.
struct PutsWhenDestroyed {
  capstan::mvar<int>* m;
  ~PutsWhenDestroyed() { m->put(7); }
};

// The body of the thread the second test abandons.  Its thread_killed,
// in flight when the thread blocked in ~TakesWhenDestroyed, is never
// freed: the rest of the stack is dropped without unwinding (Note [Blocked
// while unwinding]).  LeakSanitizer is told to expect that one object.
[[gnu::noinline]] void abandoned_thread_body(std::atomic<int>* outer, std::atomic<int>* took,
                                             std::atomic<bool>* blocked, capstan::mvar<int>* never,
                                             capstan::mvar<int>* gate) {
  Counted c{outer};
  TakesWhenDestroyed w{never, took};
  *blocked = true;
  gate->take();
  asm volatile("" ::: "memory");  // keeps this frame: no tail call
}

// Note [Main at shutdown]: threads that shutdown kills throw to main from
// their handlers (Haskell's `link`), with kill_thread and with throw_to of
// an ordinary exception, once main's function has returned.  run() must
// return main's result and account for everyone; before, main raised the
// exception inside the shutdown protocol and run() never returned.
// Guard throws to main from its destructor, as a `link` does.
struct KillsMainWhenDestroyed {
  capstan::thread_id main_id;
  std::atomic<int>* posted;
  ~KillsMainWhenDestroyed() {
    posted->fetch_add(1);
    capstan::kill_thread(main_id);  // main is masked: waits for it to land
  }
};

// Note [Main at shutdown]: throws queued on main while it was masked, one
// from a handler and one from a destructor during unwinding (a thread
// shutdown does not kill while it unwinds), are settled when main's
// function returns: the throwers return and finish; nothing is abandoned.
TEST_P(Shutdown, AThrowQueuedOnMaskedMainIsSettledAtShutdown) {
  std::atomic<int> posted{0}, returned{0};
  int r = run([&] {
    capstan::detail::set_mask(capstan::mask_state::masked_uninterruptible);
    capstan::thread_id main_id = capstan::self();
    capstan::thread_id a = capstan::fork_io([&posted, &returned, main_id] {
      posted.fetch_add(1);
      capstan::kill_thread(main_id);
      returned.fetch_add(1);
    });
    capstan::thread_id b = capstan::fork_io([&posted, main_id] {
      KillsMainWhenDestroyed g{main_id, &posted};
      throw std::runtime_error("b fails; its guard kills main");
    });
    while (posted.load() < 2 || capstan::state_of(a) != capstan::thread_state::blocked ||
           capstan::state_of(b) != capstan::thread_state::blocked)
      capstan::yield();
    return 42;  // still masked: the two kills never land
  });
  EXPECT_EQ(r, 42);
  EXPECT_EQ(returned.load(), 1) << "the handler's kill_thread never returned";
  auto s = capstan::statistics();
  EXPECT_EQ(s.threads_abandoned, 0u);
}

TEST_P(Shutdown, ThreadsThatThrowToMainFromTheirHandlersDoNotStopShutdown) {
  constexpr int kThreads = 40;
  std::atomic<int> handlers{0}, started{0};
  int r = run([&] {
    capstan::thread_id main_id = capstan::self();
    for (int i = 0; i < kThreads; ++i) {
      // main_id by value: main's frame is gone when the handlers run.
      capstan::fork_io([&handlers, &started, i, main_id] {
        try {
          started.fetch_add(1);
          capstan::sleep_for(std::chrono::hours(1));
        } catch (const capstan::thread_killed&) {
          handlers.fetch_add(1);
          if (i % 2) capstan::kill_thread(main_id);
          else capstan::throw_to(main_id, std::runtime_error("from a killed thread"));
          throw;
        }
      });
    }
    // Every thread inside its try (one that never started is reclaimed
    // without running its body); a few still on their way into the sleep.
    while (started.load() < kThreads) capstan::yield();
    return 42;
  });
  EXPECT_EQ(r, 42);
  EXPECT_EQ(handlers.load(), kThreads);
  auto s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, static_cast<std::uint64_t>(kThreads)) << s.summary();
  EXPECT_EQ(s.threads_abandoned, 0u);
}

// A thread blocked in a destructor while unwinding is not interrupted,
// but it is an ordinary waiter: another thread unwinding at the same
// shutdown can fill its mvar, and then it finishes its unwinding and
// nothing is abandoned (the fixture checks that).
TEST_P(Shutdown, ABlockedUnwindingThreadWokenByAnotherFinishes) {
  // Every mvar outlives run(): one destroyed under its waiters would end
  // them with blocked_indefinitely, not thread_killed.
  capstan::mvar<int> handoff, a_gate, b_gate;
  std::atomic<int> outer{0}, took{0};
  std::atomic<bool> a_blocked{false}, b_blocked{false};
  run([&] {
    capstan::fork_io([&] {
      Counted c{&outer};
      TakesWhenDestroyed t{&handoff, &took};
      a_blocked = true;
      a_gate.take();  // killed here; ~t then blocks on handoff
    });
    capstan::fork_io([&] {
      Counted c{&outer};
      PutsWhenDestroyed p{&handoff};
      b_blocked = true;
      b_gate.take();  // killed here; ~p fills handoff
    });
    while (!a_blocked || !b_blocked || a_gate.waiting() != 1 || b_gate.waiting() != 1)
      capstan::yield();
  });
  EXPECT_EQ(took.load(), 1) << "A's destructor never got past its take";
  EXPECT_EQ(outer.load(), 2) << "a stack was not unwound to the bottom";
  EXPECT_TRUE(handoff.is_empty());
  EXPECT_EQ(capstan::statistics().threads_killed, 2u);
}

// abandon_one_among: main leaves one thread blocked while unwinding, which
// nothing will wake, and kOthers threads each blocked in block(); it
// returns once all_blocked(kOthers) holds.  Shutdown must unwind the others
// and then abandon the one as soon as the run is quiet, long before the
// 1 s grace period (Note [Blocked while unwinding]).
constexpr int kOthers = 20;

template <class Block, class AllBlocked>
void Shutdown::abandon_one_among(Block block, AllBlocked all_blocked) {
  expect_abandoned(1);
  capstan::mvar<int> never, gate;  // outlive run(), as above
  std::atomic<int> outer{0}, took{0}, others{0};
  std::atomic<bool> blocked{false};
  testing::internal::CaptureStderr();
  std::chrono::steady_clock::time_point main_done;
  run([&] {
    auto t = capstan::fork_io([&] { abandoned_thread_body(&outer, &took, &blocked, &never, &gate); });
    capstan::label_thread(t, "waits-in-destructor");
    for (int i = 0; i < kOthers; ++i)
      capstan::fork_io([&] {
        Counted c{&others};
        block();
      });
    while (!blocked || gate.waiting() != 1 || !all_blocked(kOthers)) capstan::yield();
    main_done = std::chrono::steady_clock::now();
  });
  auto shutdown_took = std::chrono::steady_clock::now() - main_done;
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("waits-in-destructor: blocked while unwinding, on mvar take 0x"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("nothing can wake them"), std::string::npos)
      << "abandoned after the grace period, not once the run was quiet: " << err;
  EXPECT_EQ(err.find("did not finish within"), std::string::npos) << err;
  EXPECT_EQ(took.load(), 0);
  EXPECT_EQ(outer.load(), 0) << "an abandoned stack is not unwound";
  EXPECT_EQ(others.load(), kOthers) << "the other threads were not all unwound";
  EXPECT_EQ(capstan::statistics().threads_killed, static_cast<std::uint64_t>(kOthers));
  // A generous bound, far below the 1 s grace period (quiet takes 2-3
  // ticks of 10 ms).
  EXPECT_LT(shutdown_took, std::chrono::milliseconds(500));
}

// With nobody to wake it, such a thread cannot be interrupted (a throw
// from a destructor during unwinding would terminate()), so shutdown
// abandons it: the rest of its stack is freed without unwinding, it is
// reported on stderr and counted.  Every other thread (here blocked on an
// mvar) is killed and unwound first.  Since nothing could wake it once the
// others are gone (no green thread runs, no timer, no outside OS thread),
// shutdown abandons it as soon as the run is quiet, not after the grace
// period (Note [Blocked while unwinding]): the report says so, and run()
// returns long before the grace period (1 s) would have ended.
TEST_P(Shutdown, ABlockedUnwindingThreadNobodyWakesIsAbandonedAtOnce) {
  capstan::mvar<int> other_gate;  // outlives run(), as above
  abandon_one_among([&] { other_gate.take(); },
                    [&](int n) { return other_gate.waiting() == static_cast<std::size_t>(n); });
}

// The same, with the other threads blocked in the IO manager (1 h sleeps):
// their cancels, sent quietly while shutting down, must still reach the IO
// thread, or the requests they end look live and the run never quiet
// (Note [Quiet cancels at shutdown] in rts/io/io_manager.cpp).
TEST_P(Shutdown, ABlockedUnwindingThreadAmongSleepersIsAbandonedAtOnce) {
  abandon_one_among([] { capstan::sleep_for(std::chrono::hours(1)); },
                    [](int n) { return capstan::rts::io_parked() == static_cast<std::size_t>(n); });
}

// ShutdownPolicy::run_with_stuck_thread: main leaves one thread blocked
// while unwinding (nobody wakes it); returns what shutdown printed on stderr.
class ShutdownPolicy : public capstan_test::RuntimeTest {
 protected:
  std::string run_with_stuck_thread(const capstan::options& o) {
    capstan::mvar<int> never, gate;
    std::atomic<int> outer{0}, took{0};
    std::atomic<bool> blocked{false};
    testing::internal::CaptureStderr();
    run(o, [&] {
      capstan::fork_io([&] { abandoned_thread_body(&outer, &took, &blocked, &never, &gate); });
      while (!blocked || gate.waiting() != 1) capstan::yield();
    });
    return testing::internal::GetCapturedStderr();
  }
};

// An OS thread the runtime did not make could still try_put into the
// mvar, which the runtime cannot see: under the default policy shutdown
// then waits out the grace period, as before.
TEST_F(ShutdownPolicy, AnOutsideThreadKeepsTheGracePeriod) {
  expect_abandoned(1);
  std::atomic<bool> stop{false};
  std::thread outside([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::string err = run_with_stuck_thread(capstan_test::opts(2));
  stop = true;
  outside.join();
  EXPECT_NE(err.find("did not finish within"), std::string::npos) << err;
  EXPECT_EQ(err.find("nothing can wake them"), std::string::npos) << err;
  // It is named for what it is, not as a thread that swallowed the kill.
  EXPECT_NE(err.find("blocked while unwinding, on mvar take 0x"), std::string::npos) << err;
  EXPECT_EQ(err.find("caught thread_killed"), std::string::npos) << err;
}

// Waits for an fd in its destructor: run while the thread unwinds.
struct WaitsForFdWhenDestroyed {
  int fd;
  ~WaitsForFdWhenDestroyed() { capstan::wait_readable(fd); }
};

// The body of the thread the next test abandons (its thread_killed is never
// freed, as abandoned_thread_body's).
[[gnu::noinline]] void waits_for_fd_in_destructor(int fd, std::atomic<bool>* blocked,
                                                  capstan::mvar<int>* gate) {
  WaitsForFdWhenDestroyed w{fd};
  *blocked = true;
  gate->take();
  asm volatile("" ::: "memory");  // keeps this frame: no tail call
}

// A thread blocked while unwinding on an fd wait could still be woken by
// the world outside (a peer's bytes), so shutdown gives it the grace
// period - and then names it for what it is, with the fd it waited for,
// not as a thread that caught thread_killed and carried on (the report
// said that of every thread abandoned after the grace period).  The thread
// beside it that does swallow the kill is named as such.
TEST_F(ShutdownPolicy, AThreadBlockedWhileUnwindingOnAnFdIsNamedWithItsFd) {
  expect_abandoned(2);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  capstan::mvar<int> gate, stubborn_gate;  // outlive run()
  std::atomic<bool> blocked{false}, stubborn_blocked{false};
  testing::internal::CaptureStderr();
  run(capstan_test::opts(2), [&] {
    auto t = capstan::fork_io([&] { waits_for_fd_in_destructor(sv[0], &blocked, &gate); });
    capstan::label_thread(t, "closer");
    auto s = capstan::fork_io([&] {
      stubborn_blocked = true;
      for (;;) {
        try {
          stubborn_gate.take();
        } catch (const capstan::thread_killed&) {
          // carries on: each take meets the kill again at once
        }
      }
    });
    capstan::label_thread(s, "stubborn");
    while (!blocked || !stubborn_blocked || gate.waiting() != 1 || stubborn_gate.waiting() != 1)
      capstan::yield();
  });
  std::string err = testing::internal::GetCapturedStderr();
  close(sv[0]);
  close(sv[1]);
  EXPECT_NE(err.find("did not finish within"), std::string::npos) << err;
  EXPECT_NE(err.find(fmt::format("(closer: blocked while unwinding, on fd {} to be readable)", sv[0])),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("(stubborn: caught thread_killed"), std::string::npos) << err;
}

// --deadlock-detection=force ignores outside threads (the program promises
// none can wake a green thread): abandoned at once.
TEST_F(ShutdownPolicy, ForceIgnoresOutsideThreads) {
  expect_abandoned(1);
  std::atomic<bool> stop{false};
  std::thread outside([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  capstan::options o = capstan_test::opts(2);
  o.deadlock_detection = capstan::options::deadlock::force;
  std::string err = run_with_stuck_thread(o);
  stop = true;
  outside.join();
  EXPECT_NE(err.find("nothing can wake them"), std::string::npos) << err;
}

}  // namespace

namespace {

// Computes for about `us` microseconds in its destructor: a thread whose
// unwinding is slow but finishes.
struct SlowToDestroy {
  std::atomic<int>* n;
  long us;
  ~SlowToDestroy() {
    auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    while (std::chrono::steady_clock::now() < end) {
    }
    n->fetch_add(1);
  }
};

// Note [Shutdown]: the grace period runs from the last thread to finish.
// Unwinding these threads, all on capability 1, takes longer than the grace
// period in all, but one finishes every millisecond: nobody may be
// abandoned.  (main, on capability 0, watches the clock meanwhile.)
TEST_F(ShutdownPolicy, UnwindingThatKeepsFinishingOutlastsTheGracePeriod) {
  constexpr int kThreads = 1300;  // ~1.3 s of destructors, grace 1 s
  std::atomic<int> unwound{0};
  capstan::mvar<int> never;
  testing::internal::CaptureStderr();
  run(capstan_test::opts(2), [&] {
    for (int i = 0; i < kThreads; ++i)
      capstan::fork_on(1, [&] {
        SlowToDestroy s{&unwound, 1000};
        never.take();
      });
    while (never.waiting() != static_cast<std::size_t>(kThreads)) capstan::yield();
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(unwound.load(), kThreads) << err;
  EXPECT_EQ(capstan::statistics().threads_abandoned, 0u) << err;
  EXPECT_EQ(err.find("did not finish"), std::string::npos) << err;
}

}  // namespace

namespace {

// Note [Shutdown and uninterruptible_mask] (rts/schedule/yield.cpp): a
// thread that loops on safe calls under uninterruptible_mask is never
// killed, and shutdown never abandons a thread inside a safe call, so it
// waited for ever.  Once the grace period is over it is abandoned at its
// next safe call's entry, and run() returns.
TEST_F(ShutdownPolicy, ALoopOfSafeCallsUnderUninterruptibleMaskIsAbandoned) {
  expect_abandoned(1);
  std::atomic<bool> looping{false};
  testing::internal::CaptureStderr();
  run(capstan_test::opts(2), [&] {
    auto t = capstan::fork_io([&] {
      capstan::uninterruptible_mask([&] {
        for (;;) {
          looping = true;
          // Long calls, short gaps: shutdown, sampling between ticks,
          // practically never finds the thread outside a call.
          capstan::safe_call([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
        }
      });
    });
    capstan::label_thread(t, "poller");
    while (!looping) capstan::yield();
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("poller"), std::string::npos) << err;
  EXPECT_EQ(capstan::statistics().threads_abandoned, 1u) << err;
}

}  // namespace
