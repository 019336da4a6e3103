// net_backoff_report_test.cpp - the accept back-off's report (Note [Accept
// back-off] in lib/net.cpp) written to a stderr that nobody reads.  Its own
// program: the report is made once per process, so this must be the first
// back-off the process meets.
//
// The report was written with fmt::print(stderr, ...): with stderr on a
// pipe whose reader had gone, it threw std::system_error ("Broken pipe")
// out of listener::accept - ending the accept loop the back-off exists to
// keep alive - or, where SIGPIPE is not ignored, the write killed the
// process.  Now it cannot fail (Note [Diagnostics never fail] in
// rts/primitives/say.hpp).
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "capstan_test.hpp"

namespace {

using namespace std::chrono_literals;

int highest_open_fd() {
  int hi = -1;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') hi = std::max(hi, std::atoi(e->d_name));
    ::closedir(d);
  }
  return hi;
}

int plain_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(NetBackoffReport, AcceptSurvivesAStderrNobodyReads) {
  constexpr int kClients = 12;
  struct sigaction dfl {}, old_pipe {};
  dfl.sa_handler = SIG_DFL;  // a program that does not ignore SIGPIPE
  ASSERT_EQ(sigaction(SIGPIPE, &dfl, &old_pipe), 0);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  int saved_stderr = ::dup(2);
  ASSERT_GE(saved_stderr, 0);
  int accepted = 0;
  std::string death;
  capstan::run(capstan_test::opts(1), [&] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    std::vector<int> clients, fillers;
    for (int i = 0; i < kClients; ++i) {
      int fd = plain_connect(l.port());
      ASSERT_GE(fd, 0);
      clients.push_back(fd);
    }
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    ::close(p[0]);  // the log reader has gone
    ASSERT_EQ(::dup2(p[1], 2), 2);
    ::close(p[1]);
    // Room for 2 more fds, then EMFILE: fill every free number below a
    // lowered limit (at least 2 above the highest open fd), give back 2.
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(highest_open_fd() + 3);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int fd; (fd = ::dup(l.fd())) >= 0;) fillers.push_back(fd);
    ASSERT_GE(fillers.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      ::close(fillers.back());
      fillers.pop_back();
    }
    const std::uint64_t retries_before = capstan::net::detail::accept_retries();
    capstan::mvar<int> done;
    capstan::fork_io([&] {
      std::vector<capstan::net::connection> kept;
      try {
        while (accepted < kClients) {
          kept.push_back(l.accept());
          ++accepted;
        }
      } catch (const std::exception& e) {
        death = e.what();
      }
      done.put(1);
    });
    while (capstan::net::detail::accept_retries() == retries_before && death.empty())
      capstan::sleep_for(1ms);
    // fds come back: the back-off ends.
    for (int fd : fillers) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved);
    done.take();
    ::dup2(saved_stderr, 2);
    for (int fd : clients) ::close(fd);
  });
  ::dup2(saved_stderr, 2);
  ::close(saved_stderr);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  sigaction(SIGPIPE, &old_pipe, nullptr);
  EXPECT_EQ(death, "") << "the accept loop ended";
  EXPECT_EQ(accepted, kClients);
}

}  // namespace
