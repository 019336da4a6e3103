// run_test.cpp - starting and stopping the runtime: results, exceptions,
// shutdown with threads in every state, and statistics.
#include <climits>
#include <stdexcept>
#include <atomic>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::WithCaps;

class Run : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Run);

TEST_P(Run, ReturnsMainsResult) {
  EXPECT_EQ(run([] { return 42; }), 42);
  auto s = run([] { return std::string("hello"); });
  EXPECT_EQ(s, "hello");
}

TEST_P(Run, RethrowsMainsException) {
  EXPECT_THROW(run([]() -> int { throw std::out_of_range("main failed"); }), std::out_of_range);
}

struct Counted {
  std::atomic<int>* destroyed;
  explicit Counted(std::atomic<int>* d) : destroyed(d) {}
  ~Counted() { destroyed->fetch_add(1); }
};

// Threads blocked, runnable and never started at exit are all reclaimed:
// blocked ones unwind (their destructors run), nobody is left behind.
TEST_P(Run, ShutdownReclaimsBlockedAndRunnableThreads) {
  std::atomic<int> destroyed{0}, after_take{0}, started{0}, late_ran{0};
  constexpr int kBlocked = 50, kRunnable = 50;
  run([&] {
    auto forever = std::make_shared<capstan::mvar<int>>();
    for (int i = 0; i < kBlocked; ++i) {
      capstan::fork_io([&, forever] {
        Counted c(&destroyed);
        forever->take();
        after_take.fetch_add(1);
      });
    }
    while (forever->waiting() != kBlocked) capstan::yield();
    for (int i = 0; i < kRunnable; ++i) {
      capstan::fork_io([&] {
        Counted c(&destroyed);
        started.fetch_add(1);
        for (;;) capstan::yield();  // never finishes on its own
      });
    }
    while (started.load() != kRunnable) capstan::yield();
    // ... and some that never get to start at all.
    for (int i = 0; i < 10; ++i) capstan::fork_io([&] { Counted c(&destroyed); late_ran.fetch_add(1); });
  });
  EXPECT_EQ(after_take.load(), 0);
  EXPECT_EQ(destroyed.load(), kBlocked + kRunnable + late_ran.load()) << "some stacks were not unwound";
  // The fixture checks that every thread finished and none was abandoned.
  auto s = capstan::statistics();
  // The 10 unstarted ones either ran before shutdown began (finished
  // normally) or were reclaimed before they started (killed).
  EXPECT_GE(s.threads_killed, static_cast<std::uint64_t>(kBlocked + kRunnable));
  EXPECT_LE(s.threads_killed, static_cast<std::uint64_t>(kBlocked + kRunnable + 10));
}

TEST_P(Run, AThreadThatSwallowsThreadKilledIsAbandonedAndReported) {
  // The one thread this test abandons on purpose: the fixture checks that
  // exactly it is abandoned (and so still counted live).
  expect_abandoned(1);
  testing::internal::CaptureStderr();
  run([&] {
    auto t = capstan::fork_io([] {
      capstan::mvar<int> never;
      for (;;) {
        try {
          never.take();
        } catch (...) {  // wrong: swallows thread_killed
        }
      }
    });
    capstan::label_thread(t, "stubborn");
    capstan::yield();
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("did not finish"), std::string::npos) << err;
  EXPECT_NE(err.find("(stubborn: caught thread_killed"), std::string::npos) << err;
}

TEST_P(Run, StatisticsCountWhatHappened) {
  run([&] {
    capstan::mvar<int> done;
    for (int i = 0; i < 10; ++i) capstan::fork_io([&] { done.put(1); });
    for (int i = 0; i < 10; ++i) done.take();
    // The forked threads finish after their put; let them (a putter on
    // another capability may be descheduled between its put and its end).
    ASSERT_TRUE(capstan_test::green_wait_until([] { return capstan::statistics().live_threads == 1; }));
    auto s = capstan::statistics();
    EXPECT_EQ(s.threads_created, 11u);
    EXPECT_EQ(s.live_threads, 1u);  // main
    EXPECT_EQ(s.capabilities.size(), caps());
    EXPECT_GT(s.context_switches, 10u);
  });
  auto s = capstan::statistics();
  EXPECT_EQ(s.threads_finished, 11u);
  auto text = s.summary();
  EXPECT_NE(text.find("11 created"), std::string::npos) << text;
}

// Every thread's end is in the statistics, including those whose wrapper
// catches the exception to hand it on: main (run rethrows it), in-calls
// (call_in rethrows it) and async children (wait rethrows it).
TEST(RunStatistics, ThreadsEndedByAnExceptionTheirWrapperHandsOnAreCounted) {
  // main killed by a thread it forked.
  // (-N1: the killer cannot be on another capability and still running
  // when main reaches shutdown.)
  EXPECT_THROW(capstan::run(capstan_test::opts(1), [] {
                 capstan::thread_id main_id = capstan::self();
                 capstan::fork_io([main_id] { capstan::kill_thread(main_id); });
                 capstan::mvar<int>().take();
               }),
               capstan::thread_killed);
  auto s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, 1u);
  EXPECT_EQ(s.threads_died, 1u);
  // main ended by an exception of its own.
  EXPECT_THROW(capstan::run(capstan_test::opts(1), [] { throw std::runtime_error("main"); }),
               std::runtime_error);
  s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, 0u);
  EXPECT_EQ(s.threads_died, 1u);
  // main blocked for good.
  EXPECT_THROW(capstan::run(capstan_test::opts(1), [] { capstan::mvar<int>().take(); }),
               capstan::blocked_indefinitely);
  s = capstan::statistics();
  EXPECT_EQ(s.blocked_indefinitely, 1u);
  EXPECT_EQ(s.threads_died, 1u);
  // A thread reclaimed at shutdown before it ever ran is killed, so it died
  // (as one killed by kill_thread before its first run); one killed there
  // while blocked, too.
  capstan::run(capstan_test::opts(1), [] {
    capstan::fork_io([] { capstan::sleep_for(std::chrono::hours(1)); });
  });
  s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, 1u);
  EXPECT_EQ(s.threads_died, 1u);
  capstan::run(capstan_test::opts(1), [] {
    capstan::fork_io([] { capstan::sleep_for(std::chrono::hours(1)); });
    capstan::yield();
  });
  s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, 1u);
  EXPECT_EQ(s.threads_died, 1u);
  // async children cancelled and failing, in-calls failing.
  capstan::run(capstan_test::opts(2), [] {
    {
      capstan::async a([] { capstan::mvar<int>().take(); return 0; });
      while (capstan::state_of(a.id()) != capstan::thread_state::blocked) capstan::yield();
      a.cancel();
    }
    capstan::async b([]() -> int { throw std::runtime_error("child"); });
    EXPECT_THROW(b.wait(), std::runtime_error);
    capstan::safe_call([] {
      std::thread outside([] {
        for (int i = 0; i < 2; ++i)
          EXPECT_THROW(capstan::call_in([] { throw std::logic_error("in-call"); }), std::logic_error);
      });
      outside.join();
    });
  });
  s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, 1u) << s.summary();             // the cancelled async
  EXPECT_EQ(s.threads_died, 4u) << s.summary();               // it, the failing async, two in-calls
  EXPECT_EQ(s.blocked_indefinitely, 0u) << s.summary();
}

class RunErrors : public capstan_test::RuntimeTest {};

TEST_F(RunErrors, ImpossibleOptionsAreRejected) {
  capstan::options o;
  o.capabilities = 0;
  EXPECT_THROW(capstan::run(o, [] {}), capstan::usage_error);
  o.capabilities = 1;
  o.stack_size = 100;
  try {
    capstan::run(o, [] {});
    FAIL();
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("stack_size"), std::string::npos);
  }
}

// Every option has the bounds its +RTS flag has; run() names the field
// and what is accepted, and nothing runs (a huge watermark wrapped a size
// computation and corrupted the heap).
TEST_F(RunErrors, EveryOptionOutsideItsFlagsBoundsIsRejectedByName) {
  struct Case {
    const char* field;
    void (*set)(capstan::options&);
  };
  const Case cases[] = {
      {"stack_pool_watermark", [](capstan::options& o) { o.stack_pool_watermark = SIZE_MAX; }},
      {"stack_pool_watermark", [](capstan::options& o) { o.stack_pool_watermark = (1u << 24) + 1; }},
      {"max_spare_tasks", [](capstan::options& o) { o.max_spare_tasks = UINT_MAX; }},
      {"timeslice", [](capstan::options& o) { o.timeslice = std::chrono::microseconds::max(); }},
      {"timeslice", [](capstan::options& o) { o.timeslice = std::chrono::seconds(3601); }},
      {"warn_hog", [](capstan::options& o) { o.warn_hog = std::chrono::milliseconds(-1); }},
      {"warn_hog", [](capstan::options& o) { o.warn_hog = std::chrono::hours(2); }},
      {"deadlock_detection",
       [](capstan::options& o) { o.deadlock_detection = static_cast<capstan::options::deadlock>(7); }},
  };
  for (const Case& c : cases) {
    capstan::options o = capstan_test::opts(1);
    c.set(o);
    bool ran = false;
    try {
      capstan::run(o, [&] { ran = true; });
      ADD_FAILURE() << c.field << ": accepted";
    } catch (const capstan::usage_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("accepted"), std::string::npos)
          << c.field << ": " << e.what();
    }
    EXPECT_FALSE(ran) << c.field;
  }
  // The bounds themselves are accepted.
  capstan::options o = capstan_test::opts(1);
  o.stack_pool_watermark = 1u << 24;
  o.max_spare_tasks = 1024;
  o.timeslice = std::chrono::hours(1);
  o.warn_hog = std::chrono::hours(1);
  EXPECT_EQ(capstan::run(o, [] { return 5; }), 5);
}

TEST_F(RunErrors, NestedAndConcurrentRunsAreRejected) {
  run(capstan_test::opts(1), [] {
    EXPECT_THROW(capstan::run(capstan_test::opts(1), [] {}), capstan::usage_error);
    std::thread other([] { EXPECT_THROW(capstan::run(capstan_test::opts(1), [] {}), capstan::usage_error); });
    other.join();
  });
}

}  // namespace
