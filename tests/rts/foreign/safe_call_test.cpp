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
using capstan_test::green_wait_until;
using capstan_test::os_wait_until;
using capstan_test::RuntimeTest;
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
    // returns the slow way; errno set by f survives both ways.  Each call
    // waits until the peer has run meanwhile, so every call here was one
    // during which others ran (at -N1: the capability was handed over).
    std::atomic<long> peer_steps{0};
    std::atomic<bool> stop{false};
    mvar<int> done;
    fork_io([&] {
      while (!stop.load()) {
        peer_steps.fetch_add(1);
        yield();
      }
      done.put(1);
    });
    for (int i = 0; i < 20; ++i) {
      bool peer_ran = safe_call([&] {
        long seen = peer_steps.load();
        bool ran = os_wait_until([&] { return peer_steps.load() > seen; });
        errno = EDOM;
        return ran;
      });
      EXPECT_EQ(errno, EDOM);
      EXPECT_TRUE(peer_ran) << "no other thread ran during safe call " << i;
    }
    stop = true;
    done.take();
    safe_call([] { errno = ERANGE; });
    EXPECT_EQ(errno, ERANGE);
  });
}

// The overlap property: a thread blocked in a safe call does not stop
// another thread on the same capability.  The call returns once the
// computing thread has made 1000 steps during it; if it could not run, the
// call waits until kWaitGuard and the test fails.
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
    mvar<bool> progress;
    fork_on(0, [&] {
      bool progressed = safe_call([&] {  // blocks this OS thread only
        long before = ticks.load();
        return os_wait_until([&] { return ticks.load() >= before + 1000; });
      });
      progress.put(progressed);
    });
    bool progressed = progress.take();
    stop = true;
    worker_done.take();
    EXPECT_TRUE(progressed) << "the computing thread made no progress while the other "
                               "thread was blocked in safe_call";
  });
}

// Note [Returning from a safe call]: with a timeslice far longer than the
// test, the returning caller still gets back in while the computing thread
// is running (it would otherwise wait for the slice to end).  The call
// returns only once the spinner computes (holds the capability); the slice
// outlasts the spinner's failure guard.
class SafeCallPriority : public RuntimeTest {};

TEST_F(SafeCallPriority, ReturningCallerGoesFirst) {
  options o = capstan_test::opts(1, 4 * capstan_test::kWaitGuard);
  run(o, [] {
    std::atomic<bool> in_call{false}, spinning{false}, resumed{false};
    bool call_saw_spinner = false;
    mvar<bool> spinner_saw_resume;
    fork_io([&] {
      while (!in_call.load()) yield();
      spinning = true;
      // Only yield_point (a safe point), never a yield: the caller gets back
      // in only by taking the capability from a computing thread.
      auto start = std::chrono::steady_clock::now();
      while (!resumed.load() && std::chrono::steady_clock::now() - start < capstan_test::kWaitGuard)
        yield_point();
      spinner_saw_resume.put(resumed.load());
    });
    mvar<int> caller_done;
    fork_io([&] {
      safe_call([&] {
        in_call = true;
        call_saw_spinner = os_wait_until([&] { return spinning.load(); });
      });
      resumed = true;
      caller_done.put(1);
    });
    caller_done.take();
    EXPECT_TRUE(call_saw_spinner) << "the other thread did not run during the call";
    EXPECT_TRUE(spinner_saw_resume.take())
        << "the caller did not get its capability back while another thread computed";
  });
}

class SafeCallSpares : public RuntimeTest {};

TEST_F(SafeCallSpares, SpareTaskLimitRespected) {
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
    // Extra Tasks exit once they find the spare list full.  Safe calls
    // between the polls hand the capability to the Tasks that need it.
    int now = os_threads_now();
    green_wait_until([&] {
      safe_call([] { std::this_thread::yield(); });
      return (now = os_threads_now()) <= base + 2;
    });
    EXPECT_LE(now, base + 2) << "more than --spare-tasks=2 spare OS threads were kept";
  });
}

TEST_F(SafeCallSpares, NoNewOsThreadPerCallInSteadyState) {
  run(capstan_test::opts(1), [] {
    mvar<int> done;
    std::atomic<bool> stop{false};
    std::atomic<long> peer_steps{0};
    fork_io([&] {
      while (!stop.load()) {
        peer_steps.fetch_add(1);
        yield();
      }
      done.put(1);
    });
    int handed_over = 0;
    for (int i = 0; i < 2000 / capstan_test::kScale; ++i)
      handed_over += safe_call([&] {
        long seen = peer_steps.load();
        return os_wait_until([&] { return peer_steps.load() > seen; });
      });
    EXPECT_EQ(handed_over, 2000 / capstan_test::kScale);
    // Every call handed the capability to a spare (the peer ran during
    // each), but spares are reused: Tasks are made only while the pool fills.
    EXPECT_LE(statistics().tasks_created, 1u + options{}.max_spare_tasks + 1u);
    stop = true;
    done.take();
  });
}

// Note [Deferred hand-off]: a call that returns at once keeps its
// capability even while another thread waits on it; one that blocks hands
// it to a spare Task, found by the ticker.
class DeferredHandOff : public RuntimeTest {};

std::uint64_t safe_call_handoffs() {
  std::uint64_t n = 0;
  for (const auto& c : statistics().capabilities) n += c.safe_call_handoffs;
  return n;
}

TEST_F(DeferredHandOff, ShortCallsKeepTheCapability) {
  run(capstan_test::opts(1), [] {
    std::atomic<bool> stop{false};
    std::atomic<long> peer_turns{0};
    mvar<int> done;
    fork_io([&] {  // always runnable, on the one capability
      while (!stop.load()) {
        peer_turns.fetch_add(1);
        yield();
      }
      done.put(1);
    });
    green_wait_until([&] { return peer_turns.load() > 0; });  // it is queued now
    constexpr int kCalls = 10000;
    int odd = 0;
    for (int i = 0; i < kCalls; ++i) odd += safe_call([i] { return i & 1; });
    std::uint64_t handed = safe_call_handoffs();
    EXPECT_EQ(odd, kCalls / 2);
    stop = true;
    done.take();
    // Handing over at every call (as before the deferral) gives kCalls; a
    // call the OS preempts for two of the ticker's polls may be handed over.
    EXPECT_LT(handed, 100u) << "short safe calls handed their capability to a spare";
  });
}

// A thread that keeps its capability through back-to-back short calls
// still gives it up when its timeslice expires: safe_call's return is a
// safe point.  (It was not: the caller kept the capability for as long as
// it made calls, and a thread queued behind it never ran.)  The loop gives
// up after 3 s, so a failure ends the test instead of hanging it.
TEST_F(DeferredHandOff, BackToBackShortCallsYieldWhenTheirTimesliceExpires) {
  bool peer_ran_during_calls = false;
  long calls = 0;
  run(capstan_test::opts(1), [&] {
    std::atomic<bool> peer_ran{false};
    mvar<int> done;
    fork_io([&] {  // queued behind main, on the one capability
      peer_ran = true;
      done.put(1);
    });
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!peer_ran.load() && std::chrono::steady_clock::now() < give_up) {
      calls += safe_call([] { return 1; });
    }
    peer_ran_during_calls = peer_ran.load();
    done.take();
  });
  EXPECT_TRUE(peer_ran_during_calls) << "the queued thread never ran while main made " << calls
                                     << " short safe calls";
  EXPECT_GT(calls, 0);
}

TEST_F(DeferredHandOff, ABlockingCallHandsTheWaitingThreadsToASpare) {
  run(capstan_test::opts(1), [] {
    std::atomic<bool> peer_ran{false};
    mvar<int> done;
    fork_io([&] {
      peer_ran = true;
      done.put(1);
    });
    // Blocks until the queued thread has run: only a spare can run it.
    bool saw = safe_call([&] { return os_wait_until([&] { return peer_ran.load(); }); });
    EXPECT_TRUE(saw) << "the waiting thread did not run while the call blocked";
    done.take();
    EXPECT_GE(safe_call_handoffs(), 1u);
  });
}

class SafeCallMisuse : public RuntimeTest {};

TEST_F(SafeCallMisuse, RuntimeCallsInsideTheCallAndFromPlainThreads) {
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
// call returns the thread meets thread_killed and unwinds.  The call
// returns only after shutdown has begun: after it killed a sentinel
// thread blocked for ever.
class SafeCallShutdown : public RuntimeTest {};

struct SetOnUnwind {
  std::atomic<bool>* f;
  ~SetOnUnwind() { f->store(true); }
};

TEST_F(SafeCallShutdown, RunWaitsForCallsInProgress) {
  std::atomic<bool> call_finished{false}, unwound{false}, shutdown_began{false};
  bool call_saw_shutdown = false;
  run(capstan_test::opts(2), [&] {
    static mvar<int> never;
    fork_io([&] {
      SetOnUnwind g{&shutdown_began};
      never.take();
    });
    while (never.waiting() == 0) yield();
    mvar<int> entered;
    fork_io([&] {
      SetOnUnwind g{&unwound};
      safe_call([&] {
        entered.try_put(1);
        call_saw_shutdown = os_wait_until([&] { return shutdown_began.load(); });
        call_finished = true;
      });
      for (;;) yield();  // never reached: thread_killed at the call's return
    });
    entered.take();
  });
  EXPECT_TRUE(call_saw_shutdown) << "shutdown did not begin while a safe call was in progress";
  EXPECT_TRUE(call_finished.load());
  EXPECT_TRUE(unwound.load());
  // The fixture checks that neither was abandoned.
  EXPECT_GE(statistics().threads_killed, 2u);
}

CAPSTAN_INSTANTIATE_CAPS(SafeCall);

}  // namespace
