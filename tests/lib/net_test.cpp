// net_test.cpp - capstan::net: listen/accept/connect, read/write_all, EOF,
// close under a blocked thread, errors, and the echo round-trip with 1,000
// concurrent client connections.
#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <string>
#include <system_error>
#include <vector>

#include "capstan_test.hpp"

namespace {

using namespace std::chrono_literals;
using capstan_test::kScale;
using capstan_test::WithCaps;

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

// closed_soon: fd is closed within a second (a close by the last call out
// is handed to the IO thread without waiting).
bool closed_soon(int fd) {
  for (int i = 0; i < 1000; ++i) {
    if (::fcntl(fd, F_GETFD) == -1) return true;
    capstan::sleep_for(1ms);
  }
  return false;
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
      capstan::net::connection server_side;
      capstan::mvar<int> accepted;
      capstan::fork_io([&] {
        server_side = l.accept();
        accepted.put(1);
      });
      auto c = capstan::net::connect("127.0.0.1", l.port());
      accepted.take();
      int fd = c.fd();
      std::atomic<int> io_errors{0}, ebadf{0}, other{0};
      capstan::mvar<int> done;
      const int users = 3;
      for (int u = 0; u < users; ++u) {
        capstan::fork_io([&, u] {
          try {
            char buf[64];
            if (u == 2) {  // fill the send buffer, then park in write_all
              std::string big(4 << 20, 'w');
              c.write_all(big.data(), big.size());
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
    capstan::fork_io([&] {
      auto c = l.accept();
      capstan::sleep_for(50ms);  // the writer fills the buffers and parks
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
    c.write_all(data.data(), data.size());
    c.close();
    EXPECT_EQ(received.take(), sum);
  });
}

TEST_P(Net, CloseWakesAThreadBlockedInRead) {
  run([] {
    auto l = capstan::net::listener::listen("127.0.0.1", 0);
    capstan::mvar<std::string> outcome;
    capstan::net::connection server_side;
    capstan::mvar<int> accepted;
    capstan::fork_io([&] {
      server_side = l.accept();
      accepted.put(1);
    });
    auto c = capstan::net::connect("127.0.0.1", l.port());
    accepted.take();
    capstan::fork_io([&] {
      try {
        char b;
        c.read(&b, 1);
        outcome.put("read returned");
      } catch (const capstan::io_error& e) {
        outcome.put(e.what());
      }
    });
    capstan::sleep_for(20ms);
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
    // Closing under accept works the same way.
    capstan::fork_io([&] {
      try {
        l.accept();
        outcome.put("accept returned");
      } catch (const capstan::io_error& e) {
        outcome.put(e.what());
      }
    });
    capstan::sleep_for(20ms);
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
    }
    capstan::sleep_for(5ms);  // the destructor's close is asynchronous
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
    capstan::sleep_for(50ms);
    // The accept thread uses our locals: stop it before they go.  The
    // connection threads stay parked in read.
    l.close();
    stopped.take();
  });
}

CAPSTAN_INSTANTIATE_CAPS(Net);

}  // namespace
