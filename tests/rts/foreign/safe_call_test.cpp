// safe_call_test.cpp - safe foreign calls release the capability: others
// run meanwhile, the caller gets back in first, spare Tasks are bounded.
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <latch>
#include <stdexcept>
#include <thread>

#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;

namespace {

int os_threads_now() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

class SafeCall : public WithCaps {};

TEST_P(SafeCall, ReturnsResultRethrowsAndKeepsErrno) {
  run([] {
    EXPECT_EQ(safe_call([] { return 41 + 1; }), 42);
    EXPECT_THROW(safe_call([]() -> int { throw std::runtime_error("boom"); }), std::runtime_error);
    // With a runnable peer the call hands the capability to a spare and
    // returns the slow way; errno set by f survives both ways.
    mvar<int> done;
    fork_io([&] {
      for (int i = 0; i < 100; ++i) yield();
      done.put(1);
    });
    for (int i = 0; i < 20; ++i) {
      safe_call([] {
        std::this_thread::sleep_for(100us);
        errno = EDOM;
      });
      EXPECT_EQ(errno, EDOM);
    }
    done.take();
    safe_call([] { errno = ERANGE; });
    EXPECT_EQ(errno, ERANGE);
  });
}

// The overlap property, by counts: a thread blocked in a safe call does not
// stop another thread on the same (single) capability.
TEST_P(SafeCall, OthersRunDuringTheCall) {
  run([] {
    std::atomic<long> ticks{0};
    std::atomic<bool> stop{false};
    mvar<int> worker_done;
    fork_on(0, [&] {
      while (!stop.load()) {
        ticks.fetch_add(1, std::memory_order_relaxed);
        yield_point();
      }
      worker_done.put(1);
    });
    mvar<long> progress;
    fork_on(0, [&] {
      long before = 0;
      long during = safe_call([&] {
        before = ticks.load();
        std::this_thread::sleep_for(100ms);  // blocks this OS thread only
        return ticks.load();
      });
      progress.put(during - before);
    });
    long d = progress.take();
    stop = true;
    worker_done.take();
    EXPECT_GT(d, 1000) << "the computing thread made almost no progress while the other "
                          "thread was blocked in safe_call";
  });
}

// Note [Returning from a safe call]: with a timeslice far longer than the
// test, the returning caller still gets back in while the computing thread
// is running (it would otherwise wait for the slice to end).
TEST(SafeCallPriority, ReturningCallerGoesFirst) {
  options o = capstan_test::opts(1, std::chrono::microseconds(30'000'000));
  run(o, [] {
    std::atomic<bool> in_call{false}, resumed{false};
    mvar<bool> spinner_saw_resume;
    fork_io([&] {
      while (!in_call.load()) yield();
      auto start = std::chrono::steady_clock::now();
      while (!resumed.load() && std::chrono::steady_clock::now() - start < 10s) yield_point();
      spinner_saw_resume.put(resumed.load());
    });
    mvar<int> caller_done;
    fork_io([&] {
      safe_call([&] {
        in_call = true;
        std::this_thread::sleep_for(20ms);
      });
      resumed = true;
      caller_done.put(1);
    });
    caller_done.take();
    EXPECT_TRUE(spinner_saw_resume.take())
        << "the caller did not get its capability back while another thread computed";
  });
}

TEST(SafeCallSpares, SpareTaskLimitRespected) {
  options o = capstan_test::opts(1);
  o.max_spare_tasks = 2;
  run(o, [] {
    int base = os_threads_now();
    constexpr int kCalls = 12;
    std::latch all_in(kCalls);
    mvar<int> done;
    for (int i = 0; i < kCalls; ++i)
      fork_io([&] {
        // Every call blocks until all are inside: they need kCalls OS threads.
        safe_call([&] { all_in.arrive_and_wait(); });
        done.put(1);
      });
    for (int i = 0; i < kCalls; ++i) done.take();
    EXPECT_GE(statistics().tasks_created, static_cast<std::uint64_t>(kCalls));
    // Extra Tasks exit once they find the spare list full.
    int now = os_threads_now();
    for (int i = 0; i < 400 && now > base + 2; ++i) {
      safe_call([] { std::this_thread::sleep_for(5ms); });
      now = os_threads_now();
    }
    EXPECT_LE(now, base + 2) << "more than --spare-tasks=2 spare OS threads were kept";
  });
}

TEST(SafeCallSpares, NoNewOsThreadPerCallInSteadyState) {
  run(capstan_test::opts(1), [] {
    mvar<int> done;
    std::atomic<bool> stop{false};
    fork_io([&] {
      while (!stop.load()) yield();
      done.put(1);
    });
    for (int i = 0; i < 2000 / capstan_test::kScale; ++i)
      safe_call([] { std::this_thread::sleep_for(20us); });
    // Every call hands the capability to a spare (a peer is runnable), but
    // spares are reused: Tasks are made only while the pool fills.
    EXPECT_LE(statistics().tasks_created, 1u + options{}.max_spare_tasks + 1u);
    stop = true;
    done.take();
  });
}

TEST(SafeCallMisuse, RuntimeCallsInsideTheCallAndFromPlainThreads) {
  run(capstan_test::opts(1), [] {
    try {
      safe_call([] { yield(); });
      ADD_FAILURE() << "yield inside safe_call did not throw";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("safe_call"), std::string::npos) << e.what();
    }
  });
  EXPECT_THROW(safe_call([] { return 1; }), usage_error);
}

// Note [Shutdown]: run() waits for a thread inside a safe call; when the
// call returns the thread meets thread_killed and unwinds.
TEST(SafeCallShutdown, RunWaitsForCallsInProgress) {
  std::atomic<bool> call_finished{false}, unwound{false};
  run(capstan_test::opts(2), [&] {
    mvar<int> entered;
    fork_io([&] {
      struct Guard {
        std::atomic<bool>* f;
        ~Guard() { f->store(true); }
      } g{&unwound};
      safe_call([&] {
        entered.try_put(1);
        std::this_thread::sleep_for(300ms);
        call_finished = true;
      });
      for (;;) yield();  // never reached: thread_killed at the call's return
    });
    entered.take();
  });
  EXPECT_TRUE(call_finished.load());
  EXPECT_TRUE(unwound.load());
  EXPECT_EQ(statistics().threads_abandoned, 0u);
  EXPECT_GE(statistics().threads_killed, 1u);
}

CAPSTAN_INSTANTIATE_CAPS(SafeCall);

}  // namespace
