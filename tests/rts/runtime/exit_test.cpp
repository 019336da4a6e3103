// exit_test.cpp - std::exit called inside run() ends the process with the
// status it was given (Note [Exit inside run] in rts/runtime/runtime.cpp):
// no std::terminate from a joinable runtime thread, no crash in a static
// destructor.  Each case runs in a child process (a death test).
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "capstan_test.hpp"

using namespace capstan;

namespace {

// The child: at -N2, a forked green thread calls std::exit(3) while other
// green threads are blocked and busy, the ticker runs and, with `io`, the
// IO manager's thread too.
[[noreturn]] void exit_from_a_green_thread(bool io) {
  alarm(60);  // failure guard
  capstan::run(capstan_test::opts(2), [io] {
    mvar<int> never;
    fork_io([&never] { never.take(); });  // blocked for ever
    fork_io([] {                          // busy
      for (;;) yield();
    });
    if (io) sleep_for(std::chrono::milliseconds(1));  // the IO thread exists
    fork_io([] { std::exit(3); });
    never.take();
    return 0;
  });
  std::_Exit(1);  // run() must not return
}

TEST(ExitInsideRun, FromAGreenThreadExitsWithItsStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_from_a_green_thread(false), ::testing::ExitedWithCode(3), "");
}

TEST(ExitInsideRun, WithTheIoManagerRunning) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exit_from_a_green_thread(true), ::testing::ExitedWithCode(3), "");
}

TEST(ExitInsideRun, FromTheMainGreenThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(60);
        capstan::run(capstan_test::opts(2), [] {
          fork_io([] { for (;;) yield(); });
          std::exit(3);
          return 0;
        });
        std::_Exit(1);
      },
      ::testing::ExitedWithCode(3), "");
}

}  // namespace
