// spare_start_test.cpp - a spare Task the OS will not start: the work that
// waited for it stays queued, the ticker retries, and the program goes on
// (Note [No OS thread for a spare] in rts/task/handover.cpp).  The refusals
// are injected through primitives/fault_injection.hpp, as a thread limit
// would make them.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "capstan_test.hpp"
#include "primitives/fault_injection.hpp"
#include "runtime/runtime.hpp"

using namespace capstan;
namespace fi = capstan::rts::fault_injection;
using namespace std::chrono_literals;

// No timeslice: every fork is a safe point, and an expiry there (a start
// stalled past the first 20 ms slice) let the forked threads run before
// the refusals these tests set up were armed.
constexpr std::chrono::microseconds kNoSlice = std::chrono::seconds(30);

namespace {

struct KnobsOff {
  ~KnobsOff() {
    fi::fail_os_thread_start.store(-1);
    fi::refuse_os_threads.store(false);
  }
};

std::size_t count_of(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

// At -N1 the only way a forked thread can run while main blocks in a safe
// call is a spare Task: main's safe call waits for the thread's flag.
TEST(SpareStart, ARefusedSpareLeavesTheWorkQueuedAndRetries) {
  KnobsOff off;
  std::atomic<bool> ran{false};
  bool seen_in_call = false;
  ::testing::internal::CaptureStderr();
  int r = capstan::run(capstan_test::opts(1, kNoSlice), [&] {
    fork_io([&] { ran.store(true); });
    fi::fail_os_thread_start.store(0);  // the next start - the spare's - fails
    seen_in_call = safe_call([&] {
      return capstan_test::os_wait_until([&] { return ran.load(); });
    });
    return 0;
  });
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, 0);
  EXPECT_TRUE(seen_in_call) << "the forked thread never ran while main was in its safe call";
  EXPECT_EQ(fi::fail_os_thread_start.load(), -1) << "no spare start was attempted";
  auto s = statistics();
  EXPECT_EQ(s.spare_starts_refused, 1u);
  EXPECT_EQ(s.threads_finished, s.threads_created);
  EXPECT_EQ(count_of(err, "the OS refused a thread to run capability 0"), 1u) << err;
  EXPECT_NE(s.summary().find("refused to start"), std::string::npos);
}

// While the OS keeps refusing, the work waits (it cannot run: -N1, main in
// the OS) and the start is tried again and again; the report is printed
// once.  Once threads can be had, the work runs.
TEST(SpareStart, WorkWaitsWhileTheOsKeepsRefusing) {
  KnobsOff off;
  std::atomic<bool> ran{false};
  bool ran_while_refused = true, ran_after = false;
  ::testing::internal::CaptureStderr();
  int r = capstan::run(capstan_test::opts(1, kNoSlice), [&] {
    fork_io([&] { ran.store(true); });
    fi::refuse_os_threads.store(true);
    safe_call([&] {
      std::this_thread::sleep_for(30ms);
      // At least two refusals (the first retake and a retry), however
      // long the ticker was held up.
      capstan_test::os_wait_until([] { return capstan::rts::rt.spare_starts_refused.get() >= 2; });
      ran_while_refused = ran.load();
      fi::refuse_os_threads.store(false);
      ran_after = capstan_test::os_wait_until([&] { return ran.load(); });
    });
    return 0;
  });
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, 0);
  EXPECT_FALSE(ran_while_refused) << "with no spare and main in the OS nothing can run the thread";
  EXPECT_TRUE(ran_after) << "the work was not picked up once threads could be started again";
  auto s = statistics();
  // 30 ms at a retry every other 50 us poll: a few hundred on a quiet
  // machine; at least two says it retried at all.
  EXPECT_GE(s.spare_starts_refused, 2u);
  EXPECT_EQ(s.threads_finished, s.threads_created);
  EXPECT_EQ(count_of(err, "the OS refused a thread"), 1u) << err;
}

// Without any spare, the work waits for main's return and main runs it:
// the capability went back to `free` and the returning call took it.
TEST(SpareStart, AReturningCallRunsTheWorkItsSpareCouldNotStart) {
  KnobsOff off;
  std::atomic<int> ran{0};
  ::testing::internal::CaptureStderr();
  int r = capstan::run(capstan_test::opts(1, kNoSlice), [&] {
    for (int i = 0; i < 100; ++i) fork_io([&] { ran.fetch_add(1); });
    fi::refuse_os_threads.store(true);
    safe_call([] { std::this_thread::sleep_for(5ms); });
    int before = ran.load();
    // Back on the capability: the queued threads run as main waits.
    bool all = capstan_test::green_wait_until([&] { return ran.load() == 100; });
    fi::refuse_os_threads.store(false);
    return before == 0 && all ? 0 : 1;
  });
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, 0);
  EXPECT_GE(statistics().spare_starts_refused, 1u);
}

// At -N2, with the OS refusing for 20 ms, both capabilities have work
// waiting and nobody to run it: on capability 1 a thread blocks in a safe
// call; on capability 0 (main's bound Task) the thread that wants a safe
// call must leave main's OS thread for a spare first (Note [Unbound
// threads on a bound Task]), which is refused too.  Whichever call runs
// first lifts the refusal; every thread runs and every call returns.
TEST(SpareStart, EveryCapabilityRecoversAtMinusN2) {
  KnobsOff off;
  std::atomic<int> ran{0};
  ::testing::internal::CaptureStderr();
  int r = capstan::run(capstan_test::opts(2), [&] {
    mvar<int> done;
    fi::refuse_os_threads.store(true);
    for (unsigned c = 0; c < 2; ++c) {
      fork_on(c, [&, c] {
        for (int i = 0; i < 50; ++i) fork_on(c, [&] { ran.fetch_add(1); });
        safe_call([&] {
          std::this_thread::sleep_for(20ms);
          fi::refuse_os_threads.store(false);
          capstan_test::os_wait_until([&] { return ran.load() == 100; });
        });
        done.put(1);
      });
    }
    return done.take() + done.take() == 2 ? 0 : 1;
  });
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, 0);
  EXPECT_EQ(ran.load(), 100);
  auto s = statistics();
  EXPECT_EQ(s.threads_finished, s.threads_created);
  EXPECT_GE(s.spare_starts_refused, 1u);
}

// A bound thread (main) makes many short safe calls while work waits and
// the OS refuses every spare.  The ticker keeps grabbing the released
// capability to retry; a call that returns while the ticker holds it
// queues main and waits to be given the capability - which the refused
// retry must do itself (no spare will ever come while the OS refuses).
// Lost, main would wait for ever: the test would hang.
TEST(SpareStart, ABoundCallerReturnsWhileEveryRetryIsRefused) {
  KnobsOff off;
  std::atomic<int> ran{0};
  int calls = 0;
  ::testing::internal::CaptureStderr();
  int r = capstan::run(capstan_test::opts(1, kNoSlice), [&] {
    for (int i = 0; i < 20; ++i) fork_io([&] { ran.fetch_add(1); });
    fi::refuse_os_threads.store(true);
    auto end = std::chrono::steady_clock::now() + 300ms;
    while (std::chrono::steady_clock::now() < end) {
      // Long enough for the ticker's retake (one to two 50 us polls).
      safe_call([] { std::this_thread::sleep_for(100us); });
      ++calls;
    }
    int before = ran.load();
    fi::refuse_os_threads.store(false);
    bool all = capstan_test::green_wait_until([&] { return ran.load() == 20; });
    return before == 0 && all ? 0 : 1;
  });
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, 0) << "the queued threads ran while main kept its capability, or never";
  EXPECT_GE(calls, 10);
  auto s = statistics();
  EXPECT_GE(s.spare_starts_refused, 2u);
  EXPECT_EQ(s.tasks_created, 1u) << "a refused start was counted as a Task";
}

}  // namespace

// A capability stranded with nothing but a spark is not resting: the spark
// may be what a blocked thread waits for, so deadlock detection must not
// fire while the ticker retries the spare (idle.hpp, resting).  Here U
// sparks the put that it then waits for; a bound thread takes the
// capability from U's worker (which exits: no spares kept) and finishes;
// its release finds only the spark, and the OS refuses the spare that
// would run it.  Main and U stay blocked until the refusal lifts.
TEST(SpareStart, ACapabilityStrandedWithOnlyASparkIsNotADeadlock) {
  KnobsOff off;
  capstan::options o = capstan_test::opts(1);
  o.max_spare_tasks = 0;
  // The thread that lifts the refusal is an outside OS thread; force keeps
  // detection armed regardless, as it would be without that thread.
  o.deadlock_detection = options::deadlock::force;
  std::atomic<bool> stranded{false};
  int got = 0;
  std::thread lifter;
  std::string raised;
  ::testing::internal::CaptureStderr();
  int r = -1;
  try {
    r = capstan::run(o, [&] {
    mvar<int> mv, done;
    fork_io([&] {
      auto s = par([&] {
        mv.put(7);
        return 1;
      });
      int v = mv.take();
      done.put(v + s.get());
    });
    yield();  // U runs, sparks, and blocks
    fork_os([&] { stranded.store(true); });  // its OS thread starts now
    fi::refuse_os_threads.store(true);
    lifter = std::thread([&] {
      capstan_test::os_wait_until([&] { return stranded.load(); });
      // Several detection periods (about 20 ms each) with the spark stranded.
      std::this_thread::sleep_for(150ms);
      fi::refuse_os_threads.store(false);
    });
    got = done.take();
    return 0;
  });
  } catch (const blocked_indefinitely&) {
    raised = "blocked_indefinitely";
  }
  if (lifter.joinable()) lifter.join();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(raised, "") << "main was told it was deadlocked while a spark could still wake it";
  EXPECT_EQ(r, 0);
  EXPECT_EQ(got, 8);
  auto s = statistics();
  EXPECT_EQ(s.deadlocks_detected, 0u) << s.summary();
  EXPECT_GE(s.spare_starts_refused, 1u);
  EXPECT_EQ(s.threads_died, 0u);
  EXPECT_EQ(s.threads_finished, s.threads_created);
}
