// exit_test.cpp - std::exit called inside run() ends the process with the
// status it was given (Note [Exit inside run] in rts/runtime/runtime.cpp):
// no std::terminate from a joinable runtime thread, no crash in a static
// destructor.  Each case runs in a child process (a death test).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

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

// A static destructor that takes a while: the process's other threads keep
// running meanwhile, as they do while any program's statics are destroyed.
struct SlowStaticDtor {
  ~SlowStaticDtor() { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }
};

// The child: at -N2, a green thread on capability 1 keeps using the IO
// manager - sleeping, or dropping sockets with SO_LINGER set (whose close
// goes to the IO manager's closing threads) - while main calls std::exit.
[[noreturn]] void exit_while_another_thread_does_io(bool drop_lingering) {
  alarm(60);
  static SlowStaticDtor slow;  // made before run(): destroyed after the at-exit handlers
  capstan::run(capstan_test::opts(2), [drop_lingering] {
    sleep_for(std::chrono::milliseconds(1));  // the IO thread exists
    std::atomic<bool> started{false};
    fork_on(1, [&started, drop_lingering] {
      started = true;
      for (;;) {
        if (!drop_lingering) {
          sleep_for(std::chrono::microseconds(1));
          continue;
        }
        int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        linger l{1, 1};
        ::setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        { capstan::net::connection c(s); }
      }
    });
    while (!started) yield();
    for (int i = 0; i < 200; ++i) yield();
    std::exit(3);
    return 0;
  });
  std::_Exit(1);
}

// The IO manager used to be stopped by an at-exit handler while green
// threads on other capabilities went on: their next sleep reached it after
// its last drain ("a message reached the IO manager after its last drain",
// abort: every run), and a dropped lingering socket started it again, to
// be destroyed joinable (std::terminate: 10 of 10).  It now lives, as the
// runtime does, in storage no static destructor touches.
TEST(ExitInsideRun, WhileAnotherThreadSleepsInALoop) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int i = 0; i < 3; ++i)
    EXPECT_EXIT(exit_while_another_thread_does_io(false), ::testing::ExitedWithCode(3), "")
        << "round " << i;
}

TEST(ExitInsideRun, WhileAnotherThreadDropsLingeringSockets) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int i = 0; i < 3; ++i)
    EXPECT_EXIT(exit_while_another_thread_does_io(true), ::testing::ExitedWithCode(3), "")
        << "round " << i;
}

}  // namespace
