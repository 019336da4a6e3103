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
// `free_fds`, then make the process's first IO call.  It must throw a
// clear system_error (or succeed), and once the fds are back a sleep must
// work; exits 0 then, 1 otherwise.  libuv used to abort() here.
[[noreturn]] void first_sleep_with_free_fds(int free_fds) {
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

}  // namespace
