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
  if (threads_.empty()) stopping_ = false;  // a new life of the IO manager
  if (idle_ == 0 && threads_.size() < kMaxThreads) {
    try {
      threads_.reserve(kMaxThreads);
      threads_.emplace_back([this] { run(); });
    } catch (...) {
      if (threads_.empty()) return false;  // the caller closes on the IO thread
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
    ++idle_;
    cv_.wait(g, [this] { return stopping_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stopping, and nothing left
    Job j = jobs_.front();
    jobs_.pop_front();
    g.unlock();
    int rc = ::close(j.fd);  // may block for the linger time: see the Note
    int err = rc == 0 ? 0 : errno;
    g.lock();
    if (Request* r = j.r) {
      // The IO thread has stopped: wake nobody (see the Note).  Read under
      // mu_, which stop() sets it under.
      bool wake = !stopping_;
      g.unlock();
      r->err = err;
      if (wake) r->box.try_put(kReady);  // wakes the close_fd caller, if it still waits
      io.closes_done();                  // see the Note: after the wake-up
      r->release();                      // our reference
      g.lock();
    }
  }
}

void Closer::stop() noexcept {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
    done.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : done) t.join();
}

}  // namespace capstan::rts::iomgr
