// net_test.cpp - capstan::net: listen/accept/connect, read/write_all, EOF,
// close under a blocked thread, errors, the echo round-trip with 1,000
// concurrent client connections, and accept surviving a lack of fds.
// Threads known to be parked are waited for with rts::io_parked()
// (tests/parked.hpp), never with a sleep.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "capstan_test.hpp"
#include "io/io_manager.hpp"
#include "parked.hpp"

namespace {

using namespace std::chrono_literals;
using capstan_test::kScale;
using capstan_test::parked_drains;
using capstan_test::wait_parked;
using capstan_test::WithCaps;
using clk = std::chrono::steady_clock;

constexpr auto kDeadline = 20s;  // failure guard for conditions waited on

// wait_for yields until pred() holds; false if not within kDeadline.
template <class P>
bool wait_for(P pred) {
  auto until = clk::now() + kDeadline;
  while (!pred()) {
    if (clk::now() > until) return false;
    capstan::yield();
  }
  return true;
}


// echo_server: accepts until the listener is closed, one thread per
// connection echoing until EOF.  Signals `stopped` when accept ends.
void echo_server(capstan::net::listener& l, capstan::mvar<int>& stopped) {
  capstan::fork_io([&] {
    try {
      for (;;) {
        capstan::fork_io([c = l.accept()]() mutable {
          char buf[4096];
          while (std::size_t n = c.read(buf, sizeof buf)) c.write_all(buf, n);
        });
      }
    } catch (const capstan::io_error&) {  // the listener was closed under accept
    }
    stopped.put(1);
  });
}

std::string read_exactly(capstan::net::connection& c, std::size_t n) {
  std::string s(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    std::size_t k = c.read(s.data() + got, n - got);
    if (k == 0) break;
    got += k;
  }
  s.resize(got);
  return s;
}

class Net : public WithCaps {};

// Pair: a connection to a listener and its accepted server side.
struct Pair {
  capstan::net::connection client, server;
};
Pair connected_pair(capstan::net::listener& l) {
  Pair p;
  capstan::mvar<int> accepted;
  capstan::fork_io([&] {
    p.server = l.accept();
    accepted.put(1);
  });
  p.client = capstan::net::connect("127.0.0.1", l.port());
  accepted.take();
  // The connect's and the accept's wake-ups may still be counted: a caller
  // that waits for its own threads to park starts from zero (parked.hpp).
  EXPECT_TRUE(parked_drains());
  return p;
}

// closed_soon: fd gets closed (a close by the last call out is handed to
// the IO thread without waiting).
bool closed_soon(int fd) {
  return wait_for([fd] { return ::fcntl(fd, F_GETFD) == -1; });
}

// Closing a socket under calls in any state - parked in the IO manager,
// yielding before the retry, between the system call and the wait - wakes
// each with io_error (or EBADF if it had not started), never leaves it
// parked, and closes the fd once, after the last of them.  Before
// Note [Closing under a blocked call], a call between its EAGAIN and its
// wait could park on the closed fd for ever, and TSan saw close() write the
// fd field under the readers.
TEST_P(Net, CloseUnderBusyCallsNeverHangs) {
  const int rounds = 100 / kScale;
  run([rounds] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    for (int r = 0; r < rounds; ++r) {
      Pair p = connected_pair(l);
      auto& c = p.client;
      int fd = c.fd();
      std::atomic<int> io_errors{0}, ebadf{0}, other{0};
      capstan::mvar<int> done;
      const int users = 3;
      for (int u = 0; u < users; ++u) {
        capstan::fork_io([&, u] {
          try {
            char buf[64];
            if (u == 2) {  // fill the send buffer, then park in write_all
              // Until the close: loopback buffers can grow to take a few
              // MiB, so no single size is sure to park.
              std::string big(1 << 20, 'w');
              for (;;) c.write_all(big.data(), big.size());
            } else {
              c.read(buf, sizeof buf);
            }
            other.fetch_add(1);
          } catch (const capstan::io_error&) {
            io_errors.fetch_add(1);
          } catch (const std::system_error& e) {
            (e.code().value() == EBADF ? ebadf : other).fetch_add(1);
          }
          done.put(u);
        });
      }
      for (int y = 0; y < r % 5; ++y) capstan::yield();  // close at varying points
      c.close();
      for (int u = 0; u < users; ++u) done.take();
      EXPECT_EQ(io_errors.load() + ebadf.load(), users) << "round " << r;
      EXPECT_EQ(other.load(), 0) << "round " << r;
      EXPECT_TRUE(closed_soon(fd)) << "round " << r;
    }
    l.close();
  });
}

TEST_P(Net, EchoRoundTrip) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    ASSERT_NE(l.port(), 0);
    capstan::mvar<int> stopped;
    echo_server(l, stopped);
    auto c = capstan::net::connect("127.0.0.1", l.port());
    const std::string msg = "hello, capstan";
    c.write_all(msg.data(), msg.size());
    EXPECT_EQ(read_exactly(c, msg.size()), msg);
    c.shutdown_write();
    char b;
    EXPECT_EQ(c.read(&b, 1), 0u);  // the server saw EOF and closed
    l.close();
    stopped.take();
  });
}

// A host name is resolved inside safe_call (a numeric one in place).
TEST_P(Net, ConnectsByHostName) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    capstan::mvar<int> stopped;
    echo_server(l, stopped);
    auto c = capstan::net::connect("localhost", l.port());
    c.write_all("x", 1);
    EXPECT_EQ(read_exactly(c, 1), "x");
    c.shutdown_write();
    l.close();
    stopped.take();
  });
}

// A name that cannot be resolved says why in getaddrinfo's words, with
// getaddrinfo's code: "a..b" (an empty label) is refused by the resolver
// itself, so the test needs no DNS server.
// connection(fd) refuses an fd that is not open at once, with the number,
// rather than failing later with EBADF; listen, which never waits, works on
// a plain OS thread by name too (the lookup just blocks that thread: there
// is no capability to release, and no safe_call to name in an error).
TEST_P(Net, AClosedFdIsRefusedAndListenByNameWorksOffGreenThreads) {
  run([] {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    ::close(fds[0]);
    ::close(fds[1]);
    try {
      capstan::net::connection c(fds[0]);
      ADD_FAILURE() << "adopted a closed fd";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("fd {} is not open", fds[0])),
                std::string::npos) << e.what();
    }
    std::string error;
    std::uint16_t port = 0;
    std::thread([&] {
      try {
        auto l = capstan::net::listener::listen("localhost", 0);
        port = l.port();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }).join();
    EXPECT_EQ(error, "");
    EXPECT_NE(port, 0);
  });
}

TEST_P(Net, AnUnresolvableHostSaysWhyInGetaddrinfosWords) {
  run([] {
    for (bool listening : {false, true}) {
      try {
        if (listening)
          capstan::net::listener::listen("a..b", 0);
        else
          capstan::net::connect("a..b", 1);
        ADD_FAILURE() << "resolving 'a..b' did not throw";
      } catch (const std::system_error& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("cannot resolve 'a..b'"), std::string::npos) << what;
        EXPECT_EQ(e.code().category(), capstan::net::resolver_category()) << what;
        EXPECT_EQ(e.code().value(), EAI_NONAME) << what;
        std::string why = ::gai_strerror(EAI_NONAME);
        ASSERT_GE(what.size(), why.size());
        EXPECT_EQ(what.substr(what.size() - why.size()), why);  // not ": Invalid argument"
      }
    }
  });
}

TEST_P(Net, ThousandConcurrentEchoClients) {
  const int n = 1000 / kScale;
  int ok = run([n] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    capstan::mvar<int> stopped;
    echo_server(l, stopped);
    std::atomic<int> good{0};
    std::atomic<int> finished{0};
    capstan::mvar<int> all_done;
    std::uint16_t port = l.port();
    for (int i = 0; i < n; ++i) {
      capstan::fork_io([&, i] {
        try {
          auto c = capstan::net::connect("127.0.0.1", port);
          // Distinct bytes per client, in two writes, read back whole.
          std::string msg = "client " + std::to_string(i) + " " + std::string(i % 500, 'a' + i % 26);
          c.write_all(msg.data(), msg.size() / 2);
          capstan::yield();
          c.write_all(msg.data() + msg.size() / 2, msg.size() - msg.size() / 2);
          if (read_exactly(c, msg.size()) == msg) good.fetch_add(1);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "client " << i << ": " << e.what();
        }
        if (finished.fetch_add(1) + 1 == n) all_done.put(1);
      });
    }
    all_done.take();
    l.close();
    stopped.take();
    return good.load();
  });
  EXPECT_EQ(ok, n);
}

TEST_P(Net, LargeWritesParkUntilThePeerReads) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    const std::size_t size = 8 << 20;  // far beyond the socket buffers
    capstan::mvar<std::size_t> received;
    capstan::mvar<int> drained;
    capstan::fork_io([&] {
      auto c = l.accept();
      drained.take();  // the connect's and our accept's wake-ups are gone (parked.hpp)
      EXPECT_TRUE(wait_parked(1));  // the writer fills the buffers and parks
      std::vector<char> buf(65536);
      std::size_t total = 0, sum = 0;
      while (std::size_t k = c.read(buf.data(), buf.size())) {
        for (std::size_t i = 0; i < k; ++i) sum += static_cast<unsigned char>(buf[i]);
        total += k;
      }
      received.put(total == size ? sum : 0);
    });
    std::vector<char> data(size);
    std::size_t sum = 0;
    for (std::size_t i = 0; i < size; ++i) {
      data[i] = static_cast<char>(i * 7);
      sum += static_cast<unsigned char>(data[i]);
    }
    auto c = capstan::net::connect("127.0.0.1", l.port());
    EXPECT_TRUE(parked_drains());
    drained.put(1);
    c.write_all(data.data(), data.size());
    c.close();
    EXPECT_EQ(received.take(), sum);
  });
}

// Main returns while connections in this process are mid-transfer: echo
// servers and clients that never read the echo, so both ends fill up and
// wait for room.  Shutdown kills both ends, one first; a writer woken by
// its peer's close rather than by its own kill must meet the kill, not a
// printed EPIPE or ECONNRESET (Note [A failed transfer at shutdown]).
TEST_P(Net, WritersWokenByTheirPeersCloseAtShutdownAreKilledQuietly) {
  const int kClients = static_cast<int>(40 / kScale) + 4;
  for (int round = 0; round < 3; ++round) {
    run([&] {
      auto l = std::make_shared<capstan::net::listener>(capstan::net::listener::listen("127.0.0.1", 0));
      capstan::fork_io([l] {
        for (;;) {
          capstan::fork_io([c = l->accept()]() mutable {
            char buf[4096];
            while (std::size_t n = c.read(buf, sizeof buf)) c.write_all(buf, n);
          });
        }
      });
      for (int i = 0; i < kClients; ++i) {
        capstan::fork_io([port = l->port()] {
          auto c = capstan::net::connect("127.0.0.1", port);
          std::vector<char> big(1 << 16, 'x');
          for (;;) c.write_all(big.data(), big.size());  // never reads the echo
        });
      }
      capstan::sleep_for(std::chrono::milliseconds(1 + 2 * round));
    });
    auto s = capstan::statistics();
    EXPECT_EQ(s.uncaught_exceptions, 0u) << "round " << round
        << ": a writer ended by its peer's close, not by the kill";
    EXPECT_EQ(s.threads_abandoned, 0u);
  }
}

TEST_P(Net, CloseWakesAThreadBlockedInRead) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    capstan::mvar<std::string> outcome;
    Pair p = connected_pair(l);
    auto& c = p.client;
    capstan::fork_io([&] {
      try {
        char b;
        c.read(&b, 1);
        outcome.put("read returned");
      } catch (const capstan::io_error& e) {
        outcome.put(e.what());
      }
    });
    ASSERT_TRUE(wait_parked(1));  // the reader
    int fd = c.fd();
    c.close();
    EXPECT_EQ(c.fd(), -1);
    std::string msg = outcome.take();
    EXPECT_NE(msg.find("capstan::net::connection::read: fd " + std::to_string(fd) +
                       " was closed while this thread waited on it"),
              std::string::npos)
        << msg;
    EXPECT_TRUE(closed_soon(fd));  // the woken read, the last user, closed it
    char b;
    try {
      c.read(&b, 1);
      ADD_FAILURE() << "read after close";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EBADF);
    }
    // Closing under accept works the same way.  The reader's wake-up may
    // still be counted (parked.hpp).
    ASSERT_TRUE(parked_drains());
    capstan::fork_io([&] {
      try {
        l.accept();
        outcome.put("accept returned");
      } catch (const capstan::io_error& e) {
        outcome.put(e.what());
      }
    });
    ASSERT_TRUE(wait_parked(1));  // the accept
    l.close();
    l.close();  // idempotent
    EXPECT_NE(outcome.take().find("capstan::net::listener::accept"), std::string::npos);
  });
}

TEST_P(Net, ErrorsNameTheOperation) {
  run([] {
    // A port nobody listens on: bind one, close it, connect to it.
    std::uint16_t port;
    {
      auto l = capstan::net::listener::listen("127.0.0.1", 0);
      port = l.port();
      l.close();  // with no call in flight, closed before close() returns
    }
    try {
      capstan::net::connect("127.0.0.1", port);
      ADD_FAILURE() << "connect to a closed port succeeded";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), ECONNREFUSED);
      EXPECT_NE(std::string(e.what()).find("capstan::net::connect"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)),
                std::string::npos) << e.what();
    }
    try {
      capstan::net::listener::listen("no.such.host.invalid", 0);
      ADD_FAILURE() << "listen on a bad host succeeded";
    } catch (const std::system_error& e) {
      EXPECT_NE(std::string(e.what()).find("no.such.host.invalid"), std::string::npos);
    }
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    try {
      capstan::net::listener::listen("127.0.0.1", l.port());
      ADD_FAILURE() << "two listeners on one port";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code().value(), EADDRINUSE);
    }
    EXPECT_THROW(capstan::net::listener::listen("127.0.0.1", 0, 0), std::invalid_argument);
    capstan::net::connection closed;
    char b;
    EXPECT_THROW(closed.read(&b, 1), std::system_error);
  });
}

// Connections still open when main returns: their threads are killed in
// read, the destructors close the sockets, run returns.
TEST_P(Net, ShutdownWithConnectionsBlockedInRead) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    capstan::mvar<int> stopped;
    echo_server(l, stopped);
    for (int i = 0; i < 20; ++i) {
      capstan::fork_io([port = l.port()] {
        auto c = capstan::net::connect("127.0.0.1", port);
        char b;
        c.read(&b, 1);  // the server never writes first: parked until shutdown
      });
    }
    EXPECT_TRUE(wait_parked(41));  // 20 clients, 20 server threads, the accept
    // The accept thread uses our locals: stop it before they go.  The
    // connection threads stay parked in read.
    l.close();
    stopped.take();
  });
}

// highest_open_fd: the largest fd number open in this process.
int highest_open_fd() {
  int hi = -1;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') hi = std::max(hi, std::atoi(e->d_name));
    }
    ::closedir(d);
  }
  return hi;
}

// raw_connect: a plain blocking connect on loopback (completes through the
// listen queue without an accept); -errno on failure.
int raw_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int err = errno;
    ::close(fd);
    return -err;
  }
  return fd;
}

// Every call that starts after close() throws std::system_error (EBADF)
// naming the call - shutdown_write included (it returned silently).
TEST_P(Net, CallsAfterCloseAreEbadfShutdownWriteIncluded) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    Pair p = connected_pair(l);
    auto& c = p.client;
    c.close();
    char b;
    auto expect_ebadf = [](const char* call, auto&& f) {
      try {
        f();
        ADD_FAILURE() << call << " after close() did not throw";
      } catch (const std::system_error& e) {
        EXPECT_EQ(e.code().value(), EBADF) << call << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(call), std::string::npos) << e.what();
      }
    };
    expect_ebadf("connection::read", [&] { c.read(&b, 1); });
    expect_ebadf("connection::write_all", [&] { c.write_all("x", 1); });
    expect_ebadf("connection::shutdown_write", [&] { c.shutdown_write(); });
    l.close();
  });
}

// Note [Owned fds]: close_fd on a socket's fd would close it under its
// owner, which closes it again later - by then perhaps another socket's
// number.  It is refused with usage_error naming the fd and what to call,
// for connections (accepted, connected, adopted) and listeners alike; the
// socket still works and closes once.  So is adopting the fd into a second
// connection (its close would close the first owner's fd).  After the
// socket's close() the number is free again: a new file given it can be
// closed with close_fd.
TEST_P(Net, CloseFdOnASocketsFdIsAUsageError) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    Pair p = connected_pair(l);
    auto& c = p.client;
    auto& srv = p.server;
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    capstan::net::connection adopted(sv[0]);
    auto refused = [](int fd) {
      try {
        capstan::close_fd(fd);
        return std::string("accepted");
      } catch (const capstan::usage_error& e) {
        return std::string(e.what());
      }
    };
    for (int fd : {c.fd(), srv.fd(), l.fd(), adopted.fd()}) {
      std::string what = refused(fd);
      EXPECT_NE(what.find(fmt::format("fd {} belongs to a capstan::net", fd)), std::string::npos)
          << what;
      EXPECT_NE(what.find("call its close()"), std::string::npos) << what;
      EXPECT_NE(::fcntl(fd, F_GETFD), -1) << "fd " << fd << " was closed";
    }
    // A second owner of the same fd is refused as well, and adopts nothing.
    try {
      capstan::net::connection second(adopted.fd());
      ADD_FAILURE() << "a second connection adopted fd " << adopted.fd();
    } catch (const capstan::usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("already belongs to a capstan::net"),
                std::string::npos)
          << e.what();
    }
    EXPECT_NE(::fcntl(adopted.fd(), F_GETFD), -1) << "the refused adoption closed the fd";
    c.write_all("x", 1);  // still works
    char b = 0;
    EXPECT_EQ(srv.read(&b, 1), 1u);
    EXPECT_EQ(b, 'x');
    int old = adopted.fd();
    adopted.close();
    // The number is free once its owner closed it (close() on a green
    // thread returns after the close), and a plain fd given it closes.
    EXPECT_EQ(::fcntl(old, F_GETFD), -1);
    int again = ::dup2(sv[1], old);
    ASSERT_EQ(again, old);
    EXPECT_EQ(refused(again), "accepted");
    EXPECT_EQ(::fcntl(again, F_GETFD), -1);
    ::close(sv[1]);
    l.close();
  });
}

// Note [Safe points before the system call]: a time-out whose deadline
// passes while the reader, already woken by data, waits for the capability
// (main holds it, at -N1) does not cost the data: the read returns it, and
// timeout returns it.  Before, the safe point after read(2) raised the
// time-out, and the bytes were gone.  The same for accept: the connection
// taken off the backlog is returned, not dropped with its fd left open.
TEST(NetSafePoints, ATimeoutDueAsTheDataArrivesLosesNeitherBytesNorConnections) {
  // The deadline is generous and main holds the capability (in the OS)
  // until well past it: with 30 ms, main descheduled that long between
  // seeing the acceptor park and connecting let the time-out fire with
  // nothing queued.  The deadline's start is recorded by the thread that
  // starts it.
  constexpr auto kTimeLimit = 300ms;
  std::atomic<std::int64_t> started_ns{0};
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now().time_since_epoch())
        .count();
  };
  auto hold_until_past_the_deadline = [&] {
    auto due = clk::time_point(std::chrono::nanoseconds(started_ns.load())) + kTimeLimit + 60ms;
    std::this_thread::sleep_until(due);  // the deadline passes while main holds the capability
  };
  capstan::run(capstan_test::opts(1), [&] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    // accept under a time-out, woken by a client, its deadline passed before it runs
    capstan::mvar<int> accepted;
    capstan::thread_id acceptor = capstan::fork_io([&] {
      started_ns = now_ns();
      auto c = capstan::timeout(kTimeLimit, [&] { return l.accept(); });
      // Written before main hears of it: main's recv below blocks the only
      // capability, so a write after the put waited for main's 2 s limit
      // whenever the put's safe point let main run first (seen under
      // AddressSanitizer).
      if (c) c->write_all("A", 1);
      accepted.put(c ? 1 : 0);
    });
    // The acceptor parks.  Waited for by its state, not a sleep.
    ASSERT_TRUE(capstan_test::green_wait_until([&] { return capstan::state_of(acceptor) == capstan::thread_state::blocked; }));
    int client = raw_connect(l.port());
    ASSERT_GE(client, 0);
    timeval limit{2, 0};  // a dropped connection never answers: fail, do not hang
    ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    hold_until_past_the_deadline();
    int was_accepted = accepted.take();
    EXPECT_EQ(was_accepted, 1) << "the accepted connection was dropped";
    char a = 0;
    if (was_accepted) {
      EXPECT_EQ(::recv(client, &a, 1, 0), 1);
      EXPECT_EQ(a, 'A');
    }
    // read under a time-out, the same way
    capstan::mvar<capstan::net::connection> server_side;
    capstan::fork_io([&] { server_side.put(l.accept()); });
    auto c = capstan::net::connect("127.0.0.1", l.port());
    auto srv = server_side.take();
    capstan::mvar<std::string> got;
    capstan::thread_id reader = capstan::fork_io([&] {
      char buf[16];
      started_ns = now_ns();
      auto n = capstan::timeout(kTimeLimit, [&] { return c.read(buf, sizeof buf); });
      got.put(n ? std::string(buf, *n) : std::string("timed out"));
    });
    // The reader parks (by its state, as above).
    ASSERT_TRUE(capstan_test::green_wait_until([&] { return capstan::state_of(reader) == capstan::thread_state::blocked; }));
    srv.write_all("first", 5);
    hold_until_past_the_deadline();
    EXPECT_EQ(got.take(), "first");
    ::close(client);
    l.close();
  });
}

// Note [Accept back-off]: with RLIMIT_NOFILE lowered so that the server
// can accept only a few of the queued connections, accept meets EMFILE;
// it must back off and retry instead of throwing (which ended the accept
// loop, and with it the examples, before), and once fds come back the
// queued connections and a new client are served.
TEST_P(Net, AcceptSurvivesRunningOutOfFds) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  run([&saved] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    std::uint16_t port = l.port();
    // Queue connections before anyone accepts.
    std::vector<int> queued;
    for (int i = 0; i < 40; ++i) {
      int fd = raw_connect(port);
      ASSERT_GE(fd, 0) << "connect: " << std::strerror(-fd);
      queued.push_back(fd);
    }
    // Room for 4 more fds: the accept loop takes them, then meets EMFILE.
    // Lower the limit, fill every free number below it, give back 4.
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(highest_open_fd() + 1);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    std::vector<int> fillers;
    for (int fd; (fd = ::dup(l.fd())) >= 0;) fillers.push_back(fd);
    ASSERT_EQ(errno, EMFILE);
    for (int i = 0; i < 4 && !fillers.empty(); ++i) {
      ::close(fillers.back());
      fillers.pop_back();
    }
    std::uint64_t retries_before = capstan::net::detail::accept_retries();
    std::atomic<bool> accept_died{false};
    std::string death;
    capstan::mvar<int> stopped;
    capstan::fork_io([&] {
      try {
        for (;;) {
          capstan::fork_io([c = l.accept()]() mutable {  // echo until EOF
            try {
              char buf[64];
              while (std::size_t n = c.read(buf, sizeof buf)) c.write_all(buf, n);
            } catch (const std::system_error&) {
            }
          });
        }
      } catch (const capstan::io_error&) {  // the listener was closed: the end
      } catch (const std::exception& e) {
        death = e.what();
        accept_died = true;
      }
      stopped.put(1);
    });
    EXPECT_TRUE(wait_for([&] {
      return accept_died || capstan::net::detail::accept_retries() > retries_before;
    })) << "accept never met EMFILE";
    EXPECT_FALSE(accept_died.load()) << "the accept loop ended: " << death;
    auto give_back = [&] {
      for (int fd : queued) ::close(fd);
      for (int fd : fillers) ::close(fd);
      queued.clear();
      fillers.clear();
    };
    if (accept_died) {  // nothing more to see
      give_back();
      ::setrlimit(RLIMIT_NOFILE, &saved);
      return;
    }
    // Give the fds back: the clients close, their server threads see EOF
    // and close too, and the accept loop drains the queue.
    give_back();
    // A new client, under the same lowered limit, is served.
    capstan::net::connection c;
    ASSERT_TRUE(wait_for([&] {
      try {
        c = capstan::net::connect("127.0.0.1", port);
        return true;
      } catch (const std::system_error& e) {  // no fd for our side yet
        if (e.code().value() != EMFILE) throw;
        return false;
      }
    }));
    c.write_all("ping", 4);
    ASSERT_TRUE(capstan::wait_readable_for(c.fd(), kDeadline)) << "the new client was not served";
    EXPECT_EQ(read_exactly(c, 4), "ping");
    EXPECT_FALSE(accept_died.load()) << death;
    ::setrlimit(RLIMIT_NOFILE, &saved);
    c.close();
    l.close();
    stopped.take();
  });
  ::setrlimit(RLIMIT_NOFILE, &saved);
}

// Note [Interrupted fds]: close() under a call sends io_interrupt_fd, and
// the last call out closes the fd.  If that call leaves on its own (here:
// its read got data) while close() is between its count and its
// interrupt, the close must still reach the IO thread after the interrupt:
// an interrupt arriving for an already closed number would fail every wait
// on the next file that reuses the number.  A hook holds close()'s
// interrupt back until the fd is closed or a second has passed.
TEST(NetClose, InterruptIsNeverDeliveredAfterTheClose) {
  static std::atomic<bool> armed{false}, paused{false};
  static std::atomic<int> target{-1};
  armed = false;
  paused = false;
  capstan::rts::io_test_hooks.admitted = [] {
    if (!armed.exchange(false)) return;
    paused = true;
    auto until = clk::now() + 1s;
    while (::fcntl(target.load(), F_GETFD) != -1 && clk::now() < until) std::this_thread::yield();
  };
  capstan::run(capstan_test::opts(2), [] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    Pair p = connected_pair(l);
    auto& c = p.client;
    auto& server_side = p.server;
    int fd = c.fd();
    target = fd;
    capstan::mvar<std::string> got;
    capstan::fork_io([&] {
      try {
        char b = 0;
        std::size_t n = c.read(&b, 1);
        got.put(n == 1 ? std::string(1, b) : "eof");
      } catch (const std::exception& e) {
        got.put(e.what());
      }
    });
    ASSERT_TRUE(wait_parked(1));  // the reader
    armed = true;
    std::thread closer([&] { c.close(); });  // a plain thread: the hook may block it
    EXPECT_TRUE(wait_for([] { return paused.load(); }));
    server_side.write_all("x", 1);  // the reader returns on its own
    std::string r = got.take();
    EXPECT_TRUE(r == "x" || r.find("was closed") != std::string::npos) << r;
    closer.join();
    EXPECT_TRUE(closed_soon(fd));
    // Files that reuse the number can be waited on.
    std::vector<int> opened;
    bool reused = false;
    for (int i = 0; i < 64 && !reused; ++i) {
      int p[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
      opened.insert(opened.end(), {p[0], p[1]});
      reused = p[0] == fd || p[1] == fd;
    }
    ASSERT_TRUE(reused) << "the number was not reused";
    try {
      EXPECT_TRUE(capstan::wait_writable_for(fd, kDeadline));  // an idle socket: ready
    } catch (const capstan::io_error& e) {
      ADD_FAILURE() << "a wait on a file reusing the number failed: " << e.what();
    }
    for (int o : opened) capstan::close_fd(o);
    l.close();
  });
  capstan::rts::io_test_hooks.admitted = nullptr;
}

// Note [A plain close under a wait]: a plain close(2) of a connection's fd
// (misuse: the connection owns it) left net's kept handle for the number;
// a user's wait on the number, reused by a regular file, joined it and
// libuv aborted when epoll refused the file (an adversarial tester, every
// run).  A user's wait now checks net's entries too: the file is ready.
TEST_P(Net, AUserWaitOnAPlainClosedConnectionsReusedNumberIsOnTheNewFile) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    Pair p = connected_pair(l);
    capstan::mvar<int> got;
    capstan::fork_io([&] {
      char b;
      got.put(static_cast<int>(p.client.read(&b, 1)));
    });
    ASSERT_TRUE(wait_parked(1));  // the reader
    p.server.write_all("x", 1);
    EXPECT_EQ(got.take(), 1);  // net's entry for the number stays, stopped
    int n = p.client.fd();
    ::close(n);  // the misuse
    int f = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(f, 0);
    if (f != n) {
      ASSERT_EQ(::dup2(f, n), n);
      ::close(f);
    }
    EXPECT_TRUE(capstan::wait_readable_for(n, 1s));  // a regular file: ready at once
    capstan::sleep_for(5ms);                          // the loop carries on
    p.client = capstan::net::connection();            // closes n (the file) in its turn
    l.close();
  });
}

CAPSTAN_INSTANTIATE_CAPS(Net);

}  // namespace
