// closer.hpp - the IO manager's closing thread: close(2)s that may block,
// off the IO thread.
//
// Note [Closing a lingering socket]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every close of an fd the IO manager may poll runs on the IO thread, after
// it has stopped polling the fd (Note [fd registrations]).  A close(2) is
// quick - except on a socket with SO_LINGER on and a linger time, which
// blocks in close for up to that time while unsent data drains, whether or
// not the socket is non-blocking.  On the one IO thread that froze every
// sleep, fd wait and timeout of the process for the linger time (a server
// that set SO_LINGER {1, 3} through connection::fd() and dropped a
// connection whose peer did not read: an unrelated sleep_for(10ms) took
// 3.1 s).  So do_close asks the socket (getsockopt SO_LINGER, one system
// call; ENOTSOCK for anything else) and hands a lingering close to this
// thread, after stopping the polling as before.  The thread, "capstan-close"
// (its name tells deadlock detection it is the runtime's), is started on
// the first lingering close of a run and stopped by the IO manager's
// shutdown, which waits for the closes queued - each bounded by its
// socket's linger time, which its owner asked for.
//
// A close_fd caller still returns only after the close: the closer stores
// close's error in the request and fills its box (a try_put, which wakes a
// green thread from any thread), then drops its reference.  The IO thread
// finishes the request without a wake-up when it hands it over, so a kill
// of the waiter meanwhile finds it done (its cancel is a no-op), and the
// waiter's late box is nobody's.  Meanwhile the close counts as parked in
// the IO manager (io_parked), so that deadlock detection does not take its
// waiter for stuck: the count is taken on the IO thread before the
// hand-over and given back after the try_put.  If the thread cannot be
// started, the close runs on the IO thread as before.  Other closes that
// can block (a file on a hung network filesystem) are not recognised.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace capstan::rts::iomgr {

struct Request;

class Closer {
 public:
  // may_linger: would close(fd) block for a linger time?  Any thread.
  static bool may_linger(int fd) noexcept;

  // close_later queues fd's close, and r's completion if r is not null (the
  // caller has taken a reference to r for us); false if the thread could not
  // be started (the caller then closes fd itself).  IO thread.
  bool close_later(int fd, Request* r) noexcept;

  // stop waits for every queued close, then for the thread to end.  IO
  // manager's shutdown, once the IO thread has stopped.
  void stop() noexcept;

 private:
  struct Job {
    int fd;
    Request* r;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;   // mu_
  bool stopping_ = false;  // mu_
  std::thread thread_;     // the IO thread starts it; stop() joins it
};

}  // namespace capstan::rts::iomgr
