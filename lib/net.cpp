// net.cpp - capstan::net (net.hpp): TCP on non-blocking sockets that park
// the green thread on EAGAIN.
//
// Policy: try the system call first and wait for readiness only when it
// says EAGAIN (a busy connection never touches the IO manager); a close
// under a blocked call wakes it with io_error, never leaves it hanging, and
// never lets it touch a reused fd number (Note [Closing under a blocked
// call]); sockets are registered `sticky` with the IO manager because
// they are always closed through it (Note [fd registrations]).
// Rejected: a libuv uv_tcp_t per connection - libuv's streams are
// callback-driven and owned by the loop thread, so every read would be a
// cross-thread buffer hand-off; here the green thread reads into its own
// buffer and the IO thread only reports readiness, as GHC's IO manager.
// Name resolution: numeric addresses are parsed in place; any other name goes
// through getaddrinfo inside capstan::safe_call, as GHC makes it a safe
// foreign call, so a slow DNS lookup blocks only the calling green thread.
#include "capstan/net.hpp"

#include "capstan/foreign.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/io.hpp"
#include "capstan/thread.hpp"
#include "io/io_manager.hpp"  // the one rts interface net uses, with:
#include "primitives/say.hpp"  // its diagnostics (Note [Diagnostics never fail])

namespace capstan::net {
namespace {

// System calls return -errno on failure.  Out of line so errno's address is
// never kept across a green-thread switch (docs/api.md, "errno").
[[gnu::noinline]] long sys_result(long r) { return r < 0 ? -errno : r; }

[[noreturn]] void fail(int err, const std::string& what) {
  throw std::system_error(err, std::generic_category(), what);
}

// checkpoint_before_failing: on a green thread, a yield - a shutdown
// checkpoint - before a failed read, send or connect is reported (Note [A
// failed transfer at shutdown]).  Nothing on a plain OS thread.
void checkpoint_before_failing() {
  if (rts::io_on_green_thread()) capstan::yield();
}

// fail_transfer is fail for a read or send that failed.
[[noreturn, gnu::noinline]] void fail_transfer(int err, const char* what, int fd) {
  checkpoint_before_failing();
  fail(err, fmt::format("{}(fd {})", what, fd));
}

// close_socket and close_socket_nowait close a socket's fd, unmarking it
// first (Note [Owned fds] in rts/io/owned_fds.hpp).
void close_socket(int fd) {
  rts::io_release_fd(fd);
  if (rts::io_on_green_thread()) rts::io_close_fd(fd); else rts::io_close_fd_nowait(fd);
}

void close_socket_nowait(int fd) noexcept {
  rts::io_release_fd(fd);
  rts::io_close_fd_nowait(fd);
}

// Note [Closing under a blocked call]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// close() may run while other green threads are inside accept, read or
// write_all on the same socket.  Closing the fd at once (close_fd) would
// wake the calls parked in the IO manager, but not a call between its
// system call and its wait, or yielding (Note [Retry before registering]):
// it would go on to accept/read on a closed fd - or on another socket that
// reused the number - or park on it for ever.  So, as Go's poll.FD, each
// socket counts the calls using its fd in `socket_fd::use`, next to a kClosed bit:
//  * a call (class user) counts itself in, failing with EBADF if kClosed is
//    set, and out when it returns or unwinds; the last one out after a
//    close() closes the fd (io_close_fd_nowait: it may be unwinding);
//  * close() sets kClosed.  With no call counted in it closes the fd itself
//    (close_fd).  Otherwise it counts itself in (in the same CAS) and sends
//    io_interrupt_fd, which wakes the calls parked on the fd with io_error
//    and fails their later waits (Note [Interrupted fds] in
//    rts/io/fd_waits.cpp), then counts itself out like a call.  The fd stays
//    open, so its number cannot be reused, until the last call counts
//    itself out; as close() is one of the calls until its interrupt is
//    pushed, the close is always pushed after the interrupt (otherwise a
//    call ending first could close the fd before the interrupt arrived, and
//    the interrupt would then fail every wait on the next file given that
//    number);
//  * a call re-checks kClosed after each wait or yield (wait_ready).
// Orderings: count-in (CAS), count-out (fetch_sub) and close()'s CAS are
// acq_rel read-modify-writes of one word, so exactly one of them sees
// "closed, no calls" and closes the fd, after every other call is done with
// it.  A call starts the IO manager (io_start) before counting in, so a
// close() that sees the count synchronises with the count-in and sees the
// IO manager started: its io_interrupt_fd is never skipped.  The re-check
// is relaxed: a stale "open" only costs one more system call, whose wait
// then fails in the IO manager.
class user {
 public:
  user(std::atomic<unsigned>& use) : use_(use) {
    if (rts::io_on_green_thread()) rts::io_start();  // before counting in: see the Note
    unsigned s = use.load(std::memory_order_relaxed);
    do {
      if (s & detail::kClosed) return;
      // acq_rel: see the Note.  relaxed on failure: we retry with s.
    } while (!use.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                        std::memory_order_relaxed));
    in_ = true;
  }
  user(const user&) = delete;
  user& operator=(const user&) = delete;
  ~user() {
    if (!in_) return;
    if (use_.fetch_sub(1, std::memory_order_acq_rel) == (detail::kClosed | 1))
      close_socket_nowait(fd_of_last_);
  }
  // in: false when the socket was already closed (the call must not run).
  bool in() const { return in_; }
  void set_fd(int fd) { fd_of_last_ = fd; }

 private:
  std::atomic<unsigned>& use_;
  int fd_of_last_ = -1;
  bool in_ = false;
};

// enter counts a call in: the fd, or EBADF naming `what` if closed.
int enter(user& u, int fd, const char* what, const char* noun) {
  if (!u.in())
    throw std::system_error(EBADF, std::generic_category(),
                            fmt::format("{}: {} is closed", what, noun));
  u.set_fd(fd);
  return fd;
}

// close_use is close() of a connection or listener: see the Note.
void close_use(std::atomic<unsigned>& use, int fd) {
  unsigned old = use.load(std::memory_order_relaxed);
  unsigned next;
  do {
    if (old & detail::kClosed) return;  // idempotent
    // Nobody uses it: closed.  Otherwise: closed, and we are a call.
    next = old == 0 ? detail::kClosed : (old | detail::kClosed) + 1;
    // acq_rel: see the Note.  relaxed on failure: we retry with old.
  } while (!use.compare_exchange_weak(old, next, std::memory_order_acq_rel,
                                      std::memory_order_relaxed));
  if (old == 0) {
    close_socket(fd);
    return;
  }
  rts::io_interrupt_fd(fd);  // before we count out: see the Note
  if (use.fetch_sub(1, std::memory_order_acq_rel) == (detail::kClosed | 1))
    close_socket_nowait(fd);  // every call left while we interrupted
}

// Note [Safe points before the system call]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every socket call is a safe point, so that a connection that never blocks
// still yields and can be stopped - but the safe point comes before the
// system call that consumes something, never after it.  An exception
// raised after a read(2) loses the bytes it read, after an accept4 the
// connection it accepted (and leaks its fd), after the last send of a
// write_all reports a failure for data that went out (a caller that
// retries sends it twice).  That is what timeout(d, [&] { return c.read(...); })
// met when its deadline passed between the wake-up and the read: 139-161
// bytes of 2,000 lost per run, and accept() under a 1 ms timeout leaked
// 43-46 fds from 500 clients.  Raised before the call, or while the call
// waits for readiness (wait_ready, with nothing consumed yet), an
// exception leaves the data in the socket and the connection in the
// backlog for the next call.  An accepted fd is owned by its connection
// before anything else runs.  What is left is inherent: a write_all
// interrupted while it waits for room has sent part of the data.
//
// Note [A failed transfer at shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At shutdown the threads at both ends of a connection in this process are
// killed, one first: a writer waiting for room is then woken by its peer's
// close, not by the kill, and its next send fails with EPIPE or
// ECONNRESET.  Thrown as system_error, that ended the thread as an
// uncaught exception, printed at every exit of a program with socket
// writers.  So a read, send or connect that fails yields before it
// throws: a yield is a shutdown checkpoint (Note [Shutdown checkpoints] in
// rts/schedule/yield.cpp), where the thread meets thread_killed instead.
// (A connect fails so when the listener's thread, killed first, closed
// it: seen under ThreadSanitizer, where shutdown found clients still
// connecting.)  Outside shutdown the yield is a safe point on an error
// path, before the error; nothing was consumed by the failed call.  On a
// plain OS thread there is nothing to yield: the error comes at once.
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
// wait_ready parks until fd may be ready again: Note [Retry before
// registering]; io_error if the socket was closed meanwhile (Note [Closing
// under a blocked call]).
void wait_ready(int fd, bool writable, bool& retried, const char* what,
                const std::atomic<unsigned>& use) {
  if (!retried && rts::io_others_runnable()) {
    retried = true;
    capstan::yield();
  } else {
    retried = false;
    rts::io_wait_fd(fd, writable, -1, what, /*sticky=*/true);
  }
  if (use.load(std::memory_order_relaxed) & detail::kClosed)  // relaxed: see the Note
    throw io_error(fmt::format("{}: fd {} was closed while this thread waited on it", what, fd));
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // best effort
}

struct addrinfo_deleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using addrinfo_ptr = std::unique_ptr<addrinfo, addrinfo_deleter>;

// Note [Accept back-off]
// ~~~~~~~~~~~~~~~~~~~~~~
// accept(2) fails with EMFILE or ENFILE when the process or the system has
// no fd left, and with ENOBUFS or ENOMEM when the kernel is short of
// memory.  These are transient - the connection stays in the listen queue,
// and fds come back as other connections close - and a server must survive
// them (a connection flood past `ulimit -n` ended the examples with an
// uncaught std::system_error).  So listener::accept retries them itself:
// it sleeps (parking only its green thread) 5 ms, doubling up to 100 ms
// while the error lasts, as Go's net/http server does, and reports the
// first such error of the process on stderr (once: a flood would print
// thousands of lines); detail::accept_retries() counts them all.
// ECONNABORTED and EPROTO (the client gave up before we accepted) and EINTR
// retry at once, silently.  Retrying inside accept rather than throwing a
// distinguishable error keeps the idiomatic accept loop (net.hpp) correct
// as written; every other error still throws.  A close() of the listener
// during the sleep is seen when the sleep ends (io_error, as for a wait).
std::atomic<std::uint64_t> accept_retry_count{0};
std::atomic<bool> accept_retry_reported{false};

bool resource_shortage(long err) {
  return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

addrinfo_ptr resolve(const std::string& host, std::uint16_t port, bool passive,
                     const char* what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  hints.ai_flags |= AI_NUMERICHOST;  // never blocks
  int rc = ::getaddrinfo(node, service.c_str(), &hints, &res);
  if (rc == EAI_NONAME && node) {  // a name: may wait for DNS, so release the capability
    hints.ai_flags &= ~AI_NUMERICHOST;
    auto lookup = [&] { return ::getaddrinfo(node, service.c_str(), &hints, &res); };
    // Off a green thread (a plain OS thread, a safe call's function) there
    // is no capability to release: the lookup just blocks this OS thread,
    // and the caller's own checks name what it called.
    rc = rts::io_on_green_thread() ? capstan::safe_call(lookup) : lookup();
  }
  if (rc == EAI_SYSTEM) {
    int err = errno;  // before fmt::format can change it
    throw std::system_error(err, std::generic_category(),
                            fmt::format("{}: cannot resolve '{}'", what, host));
  }
  if (rc != 0)  // what() ends with gai_strerror's text, from the category
    throw std::system_error(rc, resolver_category(),
                            fmt::format("{}: cannot resolve '{}'", what, host));
  return addrinfo_ptr(res);
}

class resolver_error_category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "getaddrinfo"; }
  std::string message(int code) const override { return ::gai_strerror(code); }
};

}  // namespace

const std::error_category& resolver_category() noexcept {
  static const resolver_error_category category;
  return category;
}

// ---------------------------------------------------------------- socket_fd

namespace detail {

std::uint64_t accept_retries() noexcept {
  return accept_retry_count.load(std::memory_order_relaxed);
}

socket_fd& socket_fd::operator=(socket_fd&& o) noexcept {
  if (this != &o) {
    if (!(use.load(std::memory_order_relaxed) & kClosed)) close_socket_nowait(fd);
    fd = std::exchange(o.fd, -1);
    use.store(o.use.exchange(kClosed, std::memory_order_relaxed), std::memory_order_relaxed);
  }
  return *this;
}

socket_fd::~socket_fd() {
  if (!(use.load(std::memory_order_relaxed) & kClosed)) close_socket_nowait(fd);
}

}  // namespace detail

// ---------------------------------------------------------------- connection

connection::connection(int fd) {
  if (fd < 0)
    throw std::invalid_argument(
        fmt::format("capstan::net::connection: fd {} is not a file descriptor", fd));
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0)  // checked first: a refused fd is neither adopted nor closed
    throw std::invalid_argument(
        fmt::format("capstan::net::connection: fd {} is not open ({})", fd, std::strerror(errno)));
  // Note [Owned fds] in rts/io/owned_fds.hpp: claimed before s_ owns it,
  // so a refused fd is neither adopted nor closed.
  if (!rts::io_claim_fd(fd))
    throw usage_error(fmt::format(
        "capstan::net::connection: fd {} already belongs to a capstan::net connection or "
        "listener; two owners would close it twice (move the owner instead)",
        fd));
  if (!(fl & O_NONBLOCK)) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  s_ = detail::socket_fd(fd);  // open; not shared yet
}

std::size_t connection::read(void* buf, std::size_t n) {
  const char* what = "capstan::net::connection::read";
  user u(s_.use);
  int fd = enter(u, s_.fd, what, "connection");
  capstan::detail::safe_point();  // before the read: Note [Safe points before the system call]
  bool retried = false;
  for (;;) {
    long k = sys_result(::read(fd, buf, n));
    if (k >= 0) return static_cast<std::size_t>(k);
    if (k == -EINTR) continue;
    if (k != -EAGAIN && k != -EWOULDBLOCK)
      fail_transfer(static_cast<int>(-k), what, fd);
    wait_ready(fd, false, retried, what, s_.use);
  }
}

void connection::write_all(const void* buf, std::size_t n) {
  const char* what = "capstan::net::connection::write_all";
  user u(s_.use);
  int fd = enter(u, s_.fd, what, "connection");
  capstan::detail::safe_point();  // before the first send: Note [Safe points before the system call]
  auto* p = static_cast<const char*>(buf);
  bool retried = false;
  while (n > 0) {
    long k = sys_result(::send(fd, p, n, MSG_NOSIGNAL));
    if (k >= 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == -EINTR) continue;
    if (k != -EAGAIN && k != -EWOULDBLOCK)
      fail_transfer(static_cast<int>(-k), what, fd);
    wait_ready(fd, true, retried, what, s_.use);
  }
}

void connection::shutdown_write() {
  user u(s_.use);
  // Closed: EBADF, as every call that starts after close() (docs/io.md).
  int fd = enter(u, s_.fd, "capstan::net::connection::shutdown_write", "connection");
  long rc = sys_result(::shutdown(fd, SHUT_WR));
  if (rc < 0)
    fail(static_cast<int>(-rc), fmt::format("capstan::net::connection::shutdown_write(fd {})", fd));
}

void connection::close() { close_use(s_.use, s_.fd); }

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
  checkpoint_before_failing();  // Note [A failed transfer at shutdown]
  fail(last, fmt::format("{}: cannot connect to {}:{}", what, host, port));
}

// ---------------------------------------------------------------- listener

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
    l.s_ = detail::socket_fd(static_cast<int>(fd));  // open; not shared yet
    rts::io_claim_fd(static_cast<int>(fd));  // Note [Owned fds] in rts/io/owned_fds.hpp
    int one = 1;
    ::setsockopt(l.s_.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    long rc = sys_result(::bind(l.s_.fd, a->ai_addr, a->ai_addrlen));
    if (rc == 0) rc = sys_result(::listen(l.s_.fd, backlog));
    if (rc == 0) return l;
    last = static_cast<int>(-rc);
  }
  fail(last, fmt::format("{}: cannot listen on {}:{}", what, host, port));
}

connection listener::accept() {
  const char* what = "capstan::net::listener::accept";
  user u(s_.use);
  int lfd = enter(u, s_.fd, what, "listener");
  capstan::detail::safe_point();  // before the accept: Note [Safe points before the system call]
  bool retried = false;
  auto backoff = std::chrono::milliseconds(5);  // Note [Accept back-off]
  for (;;) {
    long fd = sys_result(::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd >= 0) {  // owned by a connection before anything can throw
      connection c(static_cast<int>(fd));
      set_nodelay(static_cast<int>(fd));
      return c;
    }
    // Transient: the client gave up, or a signal.  Retry at once.
    if (fd == -EINTR || fd == -ECONNABORTED || fd == -EPROTO) continue;
    if (resource_shortage(-fd)) {  // Note [Accept back-off]
      accept_retry_count.fetch_add(1, std::memory_order_relaxed);  // a statistic
      if (!accept_retry_reported.exchange(true, std::memory_order_relaxed))
        rts::say("{}(fd {}): {}; retrying after 5 ms, backing off up to 100 ms while it "
                   "lasts (reported once)\n",
                   what, lfd, std::strerror(static_cast<int>(-fd)));
      capstan::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
      if (s_.use.load(std::memory_order_relaxed) & detail::kClosed)
        throw io_error(fmt::format("{}: fd {} was closed while this thread waited on it", what,
                                   lfd));
      continue;
    }
    if (fd != -EAGAIN && fd != -EWOULDBLOCK)
      fail(static_cast<int>(-fd), fmt::format("{}(fd {})", what, lfd));
    wait_ready(lfd, false, retried, what, s_.use);
  }
}

std::uint16_t listener::port() const {
  const char* what = "capstan::net::listener::port";
  user u(s_.use);
  int fd = enter(u, s_.fd, what, "listener");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    fail(errno, fmt::format("{}(fd {})", what, fd));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void listener::close() { close_use(s_.use, s_.fd); }

}  // namespace capstan::net
