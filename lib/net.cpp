// net.cpp - capstan::net (net.hpp): TCP on non-blocking sockets that park
// the green thread on EAGAIN.
//
// Policy: try the system call first and wait for readiness only when it
// says EAGAIN (a busy connection never touches the IO manager); close
// through close_fd so a thread blocked on the socket is woken, never left
// hanging; sockets are registered `sticky` with the IO manager because
// they are always closed through it (Note [fd registrations]).
// Rejected: a libuv uv_tcp_t per connection - libuv's streams are
// callback-driven and owned by the loop thread, so every read would be a
// cross-thread buffer hand-off; here the green thread reads into its own
// buffer and the IO thread only reports readiness, as GHC's IO manager.
// Name resolution uses getaddrinfo, which may block the capability for a
// non-numeric host (GHC makes it a safe foreign call; capstan has none yet).
#include "capstan/net.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/thread.hpp"
#include "../rts/io/io_manager.hpp"
#include "../rts/scheduler.hpp"

namespace capstan::net {
namespace {

// System calls return -errno on failure.  Out of line so errno's address is
// never kept across a green-thread switch (docs/api.md, "errno").
[[gnu::noinline]] long sys_result(long r) { return r < 0 ? -errno : r; }

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

bool on_green_thread() {
  rts::Task* t = rts::my_task();
  return t && t->cap && t->cap->current;
}

void close_socket(int fd) {
  if (on_green_thread()) rts::io_close_fd(fd); else rts::io_close_fd_nowait(fd);
}

// Note [Retry before registering]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A wait through the IO manager costs a queue push, an eventfd write, two
// or three epoll_ctl calls on the IO thread and a cross-thread wake-up.  On
// a busy server, the data a connection waits for (the client's next
// request) usually arrives while the capability runs its other
// connections.  So on the first EAGAIN of an operation, if other threads
// are runnable on this capability, the thread yields to them and retries
// the system call once; only a second EAGAIN (or an idle capability) parks
// it in the IO manager.  At most one extra system call per wait, and no
// spinning: a thread never yields twice for one operation.  (GHC always
// registers, but its registration is an epoll_ctl from the calling thread.)
bool others_runnable() {
  rts::Task* t = rts::my_task();
  return t && t->cap && t->cap->current &&
         (!t->cap->run_queue.empty() || t->cap->inbox.maybe_nonempty());
}

// wait_ready parks until fd may be ready again: Note [Retry before registering].
void wait_ready(int fd, bool writable, bool& retried, const char* what) {
  if (!retried && others_runnable()) {
    retried = true;
    capstan::yield();
    return;
  }
  retried = false;
  rts::io_wait_fd(fd, writable, -1, what, /*sticky=*/true);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // best effort
}

struct addrinfo_deleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using addrinfo_ptr = std::unique_ptr<addrinfo, addrinfo_deleter>;

addrinfo_ptr resolve(const std::string& host, std::uint16_t port, bool passive,
                     const char* what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0)
    throw std::system_error(rc == EAI_SYSTEM ? errno : EINVAL, std::generic_category(),
                            fmt::format("{}: cannot resolve '{}': {}", what, host,
                                        ::gai_strerror(rc)));
  return addrinfo_ptr(res);
}

}  // namespace

// ---------------------------------------------------------------- connection

connection::connection(int fd) : fd_(fd) {
  if (fd < 0)
    throw std::invalid_argument(
        fmt::format("capstan::net::connection: fd {} is not a file descriptor", fd));
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0 && !(fl & O_NONBLOCK)) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

connection& connection::operator=(connection&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) rts::io_close_fd_nowait(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

// The destructor may run while unwinding thread_killed: it must neither
// block nor throw, so it leaves the close to the IO thread.
connection::~connection() {
  if (fd_ >= 0) rts::io_close_fd_nowait(fd_);
}

std::size_t connection::read(void* buf, std::size_t n) {
  if (fd_ < 0) throw std::system_error(EBADF, std::generic_category(),
                                       "capstan::net::connection::read: connection is closed");
  bool retried = false;
  for (;;) {
    long k = sys_result(::read(fd_, buf, n));
    if (k >= 0) {
      detail::safe_point();  // a connection that never blocks still yields
      return static_cast<std::size_t>(k);
    }
    if (k == -EINTR) continue;
    if (k != -EAGAIN && k != -EWOULDBLOCK)
      fail(static_cast<int>(-k), fmt::format("capstan::net::connection::read(fd {})", fd_));
    wait_ready(fd_, false, retried, "capstan::net::connection::read");
  }
}

void connection::write_all(const void* buf, std::size_t n) {
  if (fd_ < 0) throw std::system_error(EBADF, std::generic_category(),
                                       "capstan::net::connection::write_all: connection is closed");
  auto* p = static_cast<const char*>(buf);
  bool retried = false;
  while (n > 0) {
    long k = sys_result(::send(fd_, p, n, MSG_NOSIGNAL));
    if (k >= 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == -EINTR) continue;
    if (k != -EAGAIN && k != -EWOULDBLOCK)
      fail(static_cast<int>(-k), fmt::format("capstan::net::connection::write_all(fd {})", fd_));
    wait_ready(fd_, true, retried, "capstan::net::connection::write_all");
  }
  detail::safe_point();
}

void connection::shutdown_write() {
  if (fd_ < 0) return;
  long rc = sys_result(::shutdown(fd_, SHUT_WR));
  if (rc < 0)
    fail(static_cast<int>(-rc), fmt::format("capstan::net::connection::shutdown_write(fd {})", fd_));
}

void connection::close() {
  if (fd_ < 0) return;
  int fd = std::exchange(fd_, -1);
  close_socket(fd);
}

connection connect(const std::string& host, std::uint16_t port) {
  const char* what = "capstan::net::connect";
  addrinfo_ptr res = resolve(host, port, false, what);
  int last = ECONNREFUSED;
  for (addrinfo* a = res.get(); a; a = a->ai_next) {
    long fd = sys_result(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                  a->ai_protocol));
    if (fd < 0) {
      last = static_cast<int>(-fd);
      continue;
    }
    connection c;  // owns fd from here: closed on every exit
    c = connection(static_cast<int>(fd));
    long rc = sys_result(::connect(c.fd(), a->ai_addr, a->ai_addrlen));
    if (rc == -EINPROGRESS || rc == -EINTR) {
      rts::io_wait_fd(c.fd(), true, -1, what, /*sticky=*/true);
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(c.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = -err;
    }
    if (rc == 0) {
      set_nodelay(c.fd());
      return c;
    }
    last = static_cast<int>(-rc);
  }
  fail(last, fmt::format("{}: cannot connect to {}:{}", what, host, port));
}

// ---------------------------------------------------------------- listener

listener& listener::operator=(listener&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) rts::io_close_fd_nowait(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

listener::~listener() {
  if (fd_ >= 0) rts::io_close_fd_nowait(fd_);
}

listener listener::listen(const std::string& host, std::uint16_t port, int backlog) {
  const char* what = "capstan::net::listener::listen";
  if (backlog < 1)
    throw std::invalid_argument(fmt::format("{}: backlog {} must be at least 1", what, backlog));
  addrinfo_ptr res = resolve(host, port, true, what);
  int last = EADDRNOTAVAIL;
  for (addrinfo* a = res.get(); a; a = a->ai_next) {
    long fd = sys_result(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                  a->ai_protocol));
    if (fd < 0) {
      last = static_cast<int>(-fd);
      continue;
    }
    listener l;
    l.fd_ = static_cast<int>(fd);
    int one = 1;
    ::setsockopt(l.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    long rc = sys_result(::bind(l.fd_, a->ai_addr, a->ai_addrlen));
    if (rc == 0) rc = sys_result(::listen(l.fd_, backlog));
    if (rc == 0) return l;
    last = static_cast<int>(-rc);
  }
  fail(last, fmt::format("{}: cannot listen on {}:{}", what, host, port));
}

connection listener::accept() {
  const char* what = "capstan::net::listener::accept";
  if (fd_ < 0) throw std::system_error(EBADF, std::generic_category(),
                                       fmt::format("{}: listener is closed", what));
  bool retried = false;
  for (;;) {
    long fd = sys_result(::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd >= 0) {
      set_nodelay(static_cast<int>(fd));
      detail::safe_point();
      return connection(static_cast<int>(fd));
    }
    // Transient: the client gave up, or a signal.  Retry at once.
    if (fd == -EINTR || fd == -ECONNABORTED || fd == -EPROTO) continue;
    if (fd != -EAGAIN && fd != -EWOULDBLOCK)
      fail(static_cast<int>(-fd), fmt::format("{}(fd {})", what, fd_));
    wait_ready(fd_, false, retried, what);
  }
}

std::uint16_t listener::port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    fail(fd_ < 0 ? EBADF : errno, fmt::format("capstan::net::listener::port(fd {})", fd_));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void listener::close() {
  if (fd_ < 0) return;
  int fd = std::exchange(fd_, -1);
  close_socket(fd);
}

}  // namespace capstan::net
