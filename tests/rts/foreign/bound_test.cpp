// bound_test.cpp - bound threads (run()'s main, fork_os) run only on their
// own OS thread, across yields, blocking, safe calls and hand-overs.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;

namespace {

long tid() { return syscall(SYS_gettid); }

class Bound : public WithCaps {};

TEST_P(Bound, IsBoundTellsWhichOne) {
  run([] {
    EXPECT_TRUE(is_bound());
    mvar<bool> io, os;
    fork_io([&] { io.put(is_bound()); });
    fork_os([&] { os.put(is_bound()); });
    EXPECT_FALSE(io.take());
    EXPECT_TRUE(os.take());
  });
}

// Exercises everything that can move a thread: yields next to busy unbound
// threads, blocking on an mvar, safe calls that let a spare in.  Returns the
// number of times the OS thread differed from `home`.
int churn(long home, mvar<int>& ping, mvar<int>& pong, int rounds) {
  int moved = 0;
  for (int i = 0; i < rounds; ++i) {
    yield();
    moved += tid() != home;
    ping.put(i);
    EXPECT_EQ(pong.take(), i);
    moved += tid() != home;
    safe_call([] { std::this_thread::sleep_for(50us); });
    moved += tid() != home;
  }
  return moved;
}

TEST_P(Bound, MainStaysOnItsOsThread) {
  long caller = tid();
  run([&] {
    EXPECT_EQ(tid(), caller);
    mvar<int> ping, pong;
    std::atomic<bool> stop{false};
    mvar<int> done;
    for (int k = 0; k < 3; ++k)
      fork_io([&] {
        while (!stop.load()) yield();
        done.put(1);
      });
    fork_io([&] {
      for (int i = 0; i < 200; ++i) pong.put(ping.take());
    });
    EXPECT_EQ(churn(caller, ping, pong, 200), 0);
    stop = true;
    for (int k = 0; k < 3; ++k) done.take();
  });
}

TEST_P(Bound, ForkOsThreadsStayOnTheirOwnOsThreads) {
  long caller = tid();
  run([&] {
    mvar<int> ping, pong;
    mvar<int> moved_a, moved_b;
    mvar<long> tid_a, tid_b;
    // Two bound threads ping-ponging: every hand-off between them is a
    // capability hand-over between their Tasks when they share one.
    fork_os([&] {
      long me = tid();
      tid_a.put(me);
      moved_a.put(churn(me, ping, pong, 100));
    });
    fork_os([&] {
      long me = tid();
      tid_b.put(me);
      int moved = 0;
      for (int i = 0; i < 100; ++i) {
        pong.put(ping.take());
        moved += tid() != me;
        safe_call([] { std::this_thread::sleep_for(20us); });
        moved += tid() != me;
      }
      moved_b.put(moved);
    });
    long a = tid_a.take(), b = tid_b.take();
    EXPECT_NE(a, b);
    EXPECT_NE(a, caller);
    EXPECT_NE(b, caller);
    EXPECT_EQ(moved_a.take(), 0);
    EXPECT_EQ(moved_b.take(), 0);
    EXPECT_EQ(tid(), caller);
  });
}

TEST_P(Bound, ManyForkOsThreadsFinish) {
  run([&] {
    constexpr int kThreads = 32;
    mvar<int> sum;
    sum.put(0);
    mvar<int> done;
    for (int i = 0; i < kThreads; ++i)
      fork_os([&, i] {
        int v = sum.take();
        yield();
        sum.put(v + i);
        done.put(1);
      });
    for (int i = 0; i < kThreads; ++i) done.take();
    EXPECT_EQ(sum.take(), kThreads * (kThreads - 1) / 2);
  });
  // The fixture checks that every fork_os OS thread has exited by the time
  // run() returns.
}

// Note [Unbound threads on a bound Task]: an unbound thread that happens to
// run on main's OS thread and blocks in a safe call must not keep main from
// running (main can run nowhere else).
TEST_P(Bound, UnboundSafeCallDoesNotHoldMainsOsThread) {
  run([] {
    std::atomic<bool> in_call{false}, release{false};
    mvar<int> wake_main, u_done;
    fork_io([&] {
      safe_call([&] {
        in_call = true;
        auto start = std::chrono::steady_clock::now();
        while (!release.load() && std::chrono::steady_clock::now() - start < 10s)
          std::this_thread::sleep_for(100us);
      });
      u_done.put(1);
    });
    fork_io([&] {
      while (!in_call.load()) yield();
      wake_main.put(1);
    });
    wake_main.take();
    EXPECT_FALSE(release.load());
    bool still_in_call = in_call.load();
    release = true;
    u_done.take();
    EXPECT_TRUE(still_in_call);
  });
}

CAPSTAN_INSTANTIATE_CAPS(Bound);

}  // namespace
