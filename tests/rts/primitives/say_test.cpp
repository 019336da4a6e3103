// say_test.cpp - the runtime's diagnostics never fail (Note [Diagnostics
// never fail] in rts/primitives/say.hpp): stderr on a full disk or on a
// pipe whose reader has gone costs the message, not an exception or the
// process (SIGPIPE), and the caller's errno and pending signals are kept.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "primitives/say.hpp"

namespace {

// With stderr pointed at `fd` (dup2), runs f; then puts stderr back.
template <class F>
void with_stderr_on(int fd, F f) {
  int saved = ::dup(2);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(::dup2(fd, 2), 2);
  f();
  ASSERT_EQ(::dup2(saved, 2), 2);
  ::close(saved);
}

bool sigpipe_pending() {
  sigset_t p;
  sigpending(&p);
  return sigismember(&p, SIGPIPE) == 1;
}

TEST(Say, WritesTheWholeText) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  with_stderr_on(p[1], [] { capstan::rts::say("capstan: {} of {}\n", 3, "x"); });
  char buf[64] = {};
  ASSERT_EQ(::read(p[0], buf, sizeof buf), 16);
  EXPECT_EQ(std::string(buf), "capstan: 3 of x\n");
  ::close(p[0]);
  ::close(p[1]);
}

// fmt::print(stderr, ...) threw std::system_error here ("No space left on
// device"), out of listener::accept's back-off report.
TEST(Say, AFullDiskLosesTheMessageAndThrowsNothing) {
  int full = ::open("/dev/full", O_WRONLY);
  if (full < 0) GTEST_SKIP() << "no /dev/full";
  with_stderr_on(full, [] {
    errno = 1234;
    EXPECT_NO_THROW(capstan::rts::say("capstan: {}\n", "lost"));
    EXPECT_EQ(errno, 1234) << "say changed the caller's errno";
  });
  ::close(full);
}

// A pipe whose reader has gone: the write raises SIGPIPE, which (default
// action) killed the process.  say blocks it and consumes it: the process
// lives, and no SIGPIPE is left pending or delivered later.
TEST(Say, APipeWithNoReaderNeitherKillsNorLeavesASignal) {
  struct sigaction dfl {}, old {};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(sigaction(SIGPIPE, &dfl, &old), 0);  // as a program that ignores nothing
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);  // the reader has gone
  with_stderr_on(p[1], [] { capstan::rts::say("capstan: {}\n", "to nobody"); });
  EXPECT_FALSE(sigpipe_pending());
  ::close(p[1]);
  sigaction(SIGPIPE, &old, nullptr);
  SUCCEED() << "still alive";
}

// A SIGPIPE the program itself had pending (blocked) before is not say's
// to consume.
TEST(Say, ASigpipePendingBeforeIsLeftPending) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &pipe_only, &old), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGPIPE), 0);
  ASSERT_TRUE(sigpipe_pending());
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  with_stderr_on(p[1], [] { capstan::rts::say("capstan: x\n"); });
  EXPECT_TRUE(sigpipe_pending()) << "say consumed the program's own SIGPIPE";
  timespec zero{0, 0};
  sigtimedwait(&pipe_only, nullptr, &zero);  // clean up
  ::close(p[1]);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace
