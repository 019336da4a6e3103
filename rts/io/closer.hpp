// closer.hpp - the IO manager's closing threads: close(2)s that may block,
// off the IO thread.
//
// Note [Closing a lingering socket]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every close of an fd the IO manager may poll runs on the IO thread, after
// it has stopped polling the fd (Note [fd registrations]).  A close(2) is
// quick - except on a socket with SO_LINGER on and a linger time, which
// blocks in close for up to that time while unsent data drains, whether or
// not the socket is non-blocking.  On the one IO thread that froze every
// sleep, fd wait and timeout of the process for the linger time (with
// linger 1 s, a 10 ms sleep of another thread took 1,002-1,021 ms:
// IoManagerLinger.* in tests/rts/io/io_manager_test.cpp).  So do_close asks
// the socket (getsockopt SO_LINGER, one system call; ENOTSOCK for anything
// else) and hands a lingering close to a closing thread, after stopping
// the polling as before.  A lingering socket dropped on a green thread
// before anything started the IO manager starts it for the close
// (io_close_fd_nowait), rather than close on the green thread and hold
// its capability.
//
// The closing threads, "capstan-close" (the name tells deadlock detection
// they are the runtime's), are started as lingering closes arrive and
// none is free, up to kMaxThreads, and stay for the rest of the IO
// manager's life; so up to kMaxThreads closes linger at once, and only
// beyond that does one wait for another.  Each fd stays open, its number
// taken, until its close is done.  The IO manager's shutdown waits for the
// closes still queued, each as long as its socket's owner chose.
//
// A close_fd caller still returns only after the close: the closing thread
// stores close's error in the request and fills its box (a try_put, which
// wakes a green thread from any thread), then drops its reference.  The IO
// thread finishes the request without a wake-up when it hands it over, so
// a kill of the waiter meanwhile finds it done (its cancel is a no-op) and
// the late box is nobody's.  Meanwhile the close counts as parked in the
// IO manager (io_parked), so that deadlock detection does not take its
// waiter for stuck: counted on the IO thread before the hand-over, given
// back after the try_put.  A close that nobody waits for (a destructor's)
// is not counted: it cannot wake anyone.  Once the IO thread has stopped
// (shutdown), the closing threads close without waking anyone, as the IO
// thread then drops its requests unwoken (stop_everything): every green
// thread has ended or been abandoned.  If no thread can be started, the
// close runs on the IO thread as before.  Other closes that can block (a
// file on a hung network filesystem) are not recognised.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace capstan::rts::iomgr {

struct Request;

class Closer {
 public:
  static constexpr unsigned kMaxThreads = 16;

  // may_linger: would close(fd) block for a linger time?  Any thread.
  static bool may_linger(int fd) noexcept;

  // close_later queues fd's close, and r's completion if r is not null (the
  // caller has taken a reference to r, and counted it parked, for us);
  // false if no closing thread could be had (the caller then closes fd
  // itself).  IO thread.
  bool close_later(int fd, Request* r) noexcept;

  // stop waits for every queued close (waking nobody from here on), then
  // for the threads to end.  The IO manager's shutdown, once the IO thread
  // has stopped.
  void stop() noexcept;

 private:
  struct Job {
    int fd;
    Request* r;
  };
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;              // mu_
  unsigned idle_ = 0;                 // mu_: threads waiting for a job
  bool stopping_ = false;             // mu_: no wake-ups, and end when idle
  std::vector<std::thread> threads_;  // mu_; the IO thread starts them, stop() joins them
};

}  // namespace capstan::rts::iomgr
