// net.hpp - TCP sockets whose blocking calls park only the calling green
// thread: listener (listen, accept), connection (read, write_all) and
// connect.  One green thread per connection is the intended style:
//
//   auto l = capstan::net::listener::listen("127.0.0.1", 8080);
//   for (;;) {
//     capstan::fork_io([c = l.accept()]() mutable { /* c.read / c.write_all */ });
//   }
//
// Sockets are non-blocking underneath; a call that would block waits with
// wait_readable / wait_writable (io.hpp).  Errors throw std::system_error
// naming the operation, the address or fd.  close() may be called while
// other green threads are blocked on the socket: they are woken with
// io_error, never left hanging, and the fd is closed when the last of them
// returns.  Moving or destroying a socket while another thread uses it is
// undefined, as for any object.  See docs/io.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

namespace capstan::net {

namespace detail {
// use_ of a socket: kClosed once close() ran, plus the number of calls
// using the fd (lib/net.cpp, Note [Closing under a blocked call]).
inline constexpr unsigned kClosed = 1u << 31;

// socket_fd owns a socket for connection and listener: the fd, and the
// count of calls using it.  Moving leaves the source closed; destroying
// an open one hands the close to the IO thread without waiting (it may
// run while unwinding thread_killed).
struct socket_fd {
  socket_fd() = default;
  explicit socket_fd(int f) : fd(f), use(0) {}
  // Moves and the destructor need the object to themselves (no call in
  // flight), so relaxed suffices: whatever made them exclusive ordered them.
  socket_fd(socket_fd&& o) noexcept
      : fd(std::exchange(o.fd, -1)), use(o.use.exchange(kClosed, std::memory_order_relaxed)) {}
  socket_fd& operator=(socket_fd&& o) noexcept;
  ~socket_fd();
  // open_fd is the socket, or -1 once closed or moved from.
  int open_fd() const { return use.load(std::memory_order_acquire) & kClosed ? -1 : fd; }

  int fd = -1;  // set at construction and by moves only
  // kClosed | calls using fd (Note [Closing under a blocked call]);
  // mutable: listener::port() is a call too.
  mutable std::atomic<unsigned> use{kClosed};
};

// accept_retries: how many times listener::accept has met a shortage of
// fds or kernel memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) in this process
// and retried after a back-off (docs/io.md, "Accept back-off").
std::uint64_t accept_retries() noexcept;
}  // namespace detail

// connection is one connected TCP socket (TCP_NODELAY on).  Movable, not
// copyable; the destructor closes it.
class connection {
 public:
  connection() = default;
  // connection(fd) takes ownership of a connected socket; it is made
  // non-blocking.
  explicit connection(int fd);
  connection(connection&& o) noexcept = default;
  connection& operator=(connection&& o) noexcept = default;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() = default;

  // read reads at most n bytes into buf, parking until at least one is
  // available; returns how many, 0 at end of stream.
  std::size_t read(void* buf, std::size_t n);
  // write_all writes all n bytes, parking while the socket buffer is full.
  // A peer that has gone throws std::system_error (EPIPE/ECONNRESET), never
  // SIGPIPE.
  void write_all(const void* buf, std::size_t n);
  // shutdown_write sends end-of-stream to the peer (shutdown(SHUT_WR));
  // std::system_error (EBADF) once the connection is closed.
  void shutdown_write();
  // close closes the socket: at once (through close_fd) if no other call
  // uses it; otherwise it wakes the threads blocked in read/write_all on it
  // with io_error, and the last of them to return closes it.  Later calls
  // throw.  Idempotent; any thread.
  void close();
  // fd is the socket, or -1 once closed or moved from.
  int fd() const { return s_.open_fd(); }
  explicit operator bool() const { return fd() >= 0; }

 private:
  detail::socket_fd s_;
};

// listener is a listening TCP socket.  Movable, not copyable; the
// destructor closes it.
class listener {
 public:
  listener() = default;
  // listen binds host:port (port 0: any free port; host a numeric address
  // or a name, resolved with getaddrinfo) and listens with `backlog`.
  static listener listen(const std::string& host, std::uint16_t port, int backlog = 1024);
  listener(listener&& o) noexcept = default;
  listener& operator=(listener&& o) noexcept = default;
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;
  ~listener() = default;

  // accept parks until a client connects and returns its connection.  A
  // client that gave up first is skipped; a shortage of fds or kernel
  // memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) is waited out with a back-off
  // of 5 ms doubling to 100 ms, reported once per process on stderr, so an
  // accept loop survives a connection flood past `ulimit -n`.
  connection accept();
  // port is the bound port (useful after listen(host, 0)).
  std::uint16_t port() const;
  // close stops listening, as connection::close: a thread blocked in
  // accept gets io_error, and the last call using the socket closes it.
  // Idempotent; any thread.
  void close();
  // fd is the socket, or -1 once closed or moved from.
  int fd() const { return s_.open_fd(); }

 private:
  detail::socket_fd s_;
};

// connect opens a TCP connection to host:port, parking until it is
// established.  Throws std::system_error naming host:port on failure.
connection connect(const std::string& host, std::uint16_t port);

// resolver_category is the error category of a host that getaddrinfo
// could not resolve (connect, listener::listen): the code's value is
// getaddrinfo's EAI_* result and its message gai_strerror's text.  (A
// failure of the system call beneath, EAI_SYSTEM, carries errno in
// std::generic_category instead.)
const std::error_category& resolver_category() noexcept;

}  // namespace capstan::net
