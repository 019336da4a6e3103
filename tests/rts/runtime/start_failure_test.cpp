// start_failure_test.cpp - run() whose start-up fails rolls everything
// back and rethrows; the next run() works.  Failures are injected through
// primitives/fault_injection.hpp (an OS thread or the ticker that cannot
// start), as a machine out of threads or memory would fail them.
#include <system_error>

#include "capstan_test.hpp"
#include "primitives/fault_injection.hpp"

using namespace capstan;
namespace fi = capstan::rts::fault_injection;

namespace {

// A run that must work after a failed one: every capability schedules
// (a thread forked on each runs), and the statistics of the run see only
// its own Tasks and threads.
void expect_a_working_run(unsigned caps) {
  int r = capstan::run(capstan_test::opts(caps), [caps] {
    mvar<unsigned> done;
    for (unsigned c = 0; c < caps; ++c)
      fork_on(c, [&done, c] { done.put(current_capability() == c); });
    unsigned on_their_capability = 0;
    for (unsigned c = 0; c < caps; ++c) on_their_capability += done.take();
    return static_cast<int>(on_their_capability);
  });
  EXPECT_EQ(r, static_cast<int>(caps));
  auto s = statistics();
  EXPECT_EQ(s.capabilities.size(), caps);
  EXPECT_EQ(s.threads_created, caps + 1);  // main + one per capability
  EXPECT_EQ(s.live_threads, 0u);
}

TEST(StartFailure, AnOsThreadThatCannotStartIsRolledBack) {
  // Capabilities 1 and 2 get their OS threads, capability 3's fails: the
  // two running schedulers must be stopped and waited for.
  bool ran_main = false;
  fi::fail_os_thread_start.store(2);
  EXPECT_THROW(capstan::run(capstan_test::opts(4), [&] { ran_main = true; return 0; }),
               std::system_error);
  EXPECT_EQ(fi::fail_os_thread_start.load(), -1) << "the injected failure was not reached";
  EXPECT_FALSE(ran_main) << "main must not run when start-up failed";
  expect_a_working_run(4);
}

TEST(StartFailure, ATickerThatCannotStartIsRolledBack) {
  bool ran_main = false;
  fi::fail_ticker_start.store(0);
  EXPECT_THROW(capstan::run(capstan_test::opts(3), [&] { ran_main = true; return 0; }),
               std::system_error);
  EXPECT_EQ(fi::fail_ticker_start.load(), -1);
  EXPECT_FALSE(ran_main);
  expect_a_working_run(3);
}

TEST(StartFailure, RepeatedFailuresLeaveNothingBehind) {
  for (int i = 0; i < 20; ++i) {
    if (i % 2) fi::fail_ticker_start.store(0); else fi::fail_os_thread_start.store(i % 3);
    EXPECT_THROW(capstan::run(capstan_test::opts(4), [] { return 0; }), std::system_error);
  }
  expect_a_working_run(4);
}

}  // namespace
