// closer.cpp - see Note [Closing a lingering socket] in io/closer.hpp.
#include "io/closer.hpp"

#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/io_thread.hpp"

namespace capstan::rts::iomgr {

bool Closer::may_linger(int fd) noexcept {
  linger l{};
  socklen_t n = sizeof l;
  return ::getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &n) == 0 && l.l_onoff != 0 && l.l_linger > 0;
}

bool Closer::close_later(int fd, Request* r) noexcept {
  std::lock_guard<std::mutex> g(mu_);
  if (!thread_.joinable()) {
    try {
      stopping_ = false;
      thread_ = std::thread([this] { run(); });
    } catch (...) {
      return false;  // the caller closes on the IO thread: slow, not lost
    }
  }
  try {
    jobs_.push_back(Job{fd, r});
  } catch (...) {
    return false;
  }
  cv_.notify_one();
  return true;
}

void Closer::run() {
  pthread_setname_np(pthread_self(), "capstan-close");  // Note [Deadlock detection]
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left
    Job j = jobs_.front();
    jobs_.pop_front();
    g.unlock();
    int rc = ::close(j.fd);  // may block for the linger time: see the Note
    int err = rc == 0 ? 0 : errno;
    if (Request* r = j.r) {
      r->err = err;
      r->box.try_put(kReady);  // wakes the close_fd caller, if it still waits
      io.closes_done();        // see the Note: after the wake-up
      r->release();            // our reference
    } else {
      io.closes_done();
    }
    g.lock();
  }
}

void Closer::stop() noexcept {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
  thread_ = std::thread();
}

}  // namespace capstan::rts::iomgr
