// io_first_start_test.cpp - the first IO call of a process, made when
// almost no fd is free (Note [libuv's process-wide set-up] in
// rts/io/io_manager.cpp).  Each case runs in a fresh process (a
// threadsafe death test re-executes the binary), since libuv's set-up
// happens once per process.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <system_error>
#include <vector>

#include "capstan_test.hpp"

namespace {

using namespace std::chrono_literals;

// first_sleep_with_free_fds: lower the fd limit, use up every fd but
// `free_fds`, then make the run's first IO call (the process's first, unless
// `after_a_first_start`: then an earlier run has started and stopped the IO
// manager).  It must throw a clear system_error (or succeed) and, if it
// failed, leave every one of the `free_fds` fds free; once the fds are back
// a sleep must work.  Exits 0 then, 1 otherwise.  libuv used to abort()
// here, and a uv_loop_init that failed part-way kept 3 fds for good.
[[noreturn]] void first_sleep_with_free_fds(int free_fds, bool after_a_first_start = false) {
  if (after_a_first_start)
    capstan::run(capstan_test::opts(1), [] { capstan::sleep_for(1ms); });
  int rc = capstan::run(capstan_test::opts(1), [free_fds] {
    struct rlimit rl{64, 64};
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) return 2;
    std::vector<int> held;
    for (;;) {
      int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      held.push_back(fd);
    }
    for (int i = 0; i < free_fds && !held.empty(); ++i) {
      ::close(held.back());
      held.pop_back();
    }
    bool clear = true;
    try {
      capstan::sleep_for(1ms);
    } catch (const std::system_error& e) {
      clear = std::string(e.what()).find("cannot start the IO manager") != std::string::npos;
      if (!clear) std::fprintf(stderr, "unclear error: %s\n", e.what());
      // Nothing kept: every fd that was free still is.
      std::vector<int> again;
      for (int i = 0; i < free_fds; ++i) {
        int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          std::fprintf(stderr, "the failed start kept %d fd(s)\n", free_fds - i);
          clear = false;
          break;
        }
        again.push_back(fd);
      }
      for (int fd : again) ::close(fd);
    }
    for (int fd : held) ::close(fd);
    capstan::sleep_for(1ms);  // starts now
    return clear ? 0 : 1;
  });
  std::_Exit(rc);
}

TEST(IoFirstStart, WithOneFreeFdTheFirstIoCallFailsCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(first_sleep_with_free_fds(1), ::testing::ExitedWithCode(0), "");
}

TEST(IoFirstStart, WithTwoFreeFdsTheFirstIoCallFailsCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(first_sleep_with_free_fds(2), ::testing::ExitedWithCode(0), "");
}

TEST(IoFirstStart, WithNoFreeFdTheFirstIoCallFailsCleanly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(first_sleep_with_free_fds(0), ::testing::ExitedWithCode(0), "");
}

// With 3 to 5 fds free, the probe passed and uv_loop_init failed part-way
// (its wake-up eventfd), keeping its epoll fd and its signal pipe open: a
// server retrying under fd pressure lost 3 fds per attempt.
TEST(IoFirstStart, WithThreeToFiveFreeFdsAFailedStartKeepsNoFd) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int free_fds = 3; free_fds <= 5; ++free_fds)
    EXPECT_EXIT(first_sleep_with_free_fds(free_fds), ::testing::ExitedWithCode(0), "")
        << free_fds << " free fds";
}

// The same for a later run's start (libuv's one-time set-up done).
TEST(IoFirstStart, ALaterStartWithFewFreeFdsKeepsNoFd) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int free_fds = 0; free_fds <= 4; ++free_fds)
    EXPECT_EXIT(first_sleep_with_free_fds(free_fds, /*after_a_first_start=*/true),
                ::testing::ExitedWithCode(0), "")
        << free_fds << " free fds";
}

}  // namespace
