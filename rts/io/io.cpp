// io.cpp - the public IO API (capstan/io.hpp) on the IO manager
// (io/io_manager.hpp).  Policy lives there; this file only names the
// public calls in errors and handles the cases that need no IO thread.
#include "capstan/io.hpp"

#include "capstan/thread.hpp"
#include "io/io_manager.hpp"
#include "schedule/schedule.hpp"

namespace capstan {
namespace detail {

void sleep_ns(long long ns) {
  if (ns <= 0) {  // nothing to wait for: a yield, as GHC's threadDelay 0
    rts::require_green_thread("capstan::sleep_for");
    capstan::yield();
    return;
  }
  rts::io_sleep(ns);
}

bool wait_fd(int fd, bool writable, long long timeout_ns) {
  return rts::io_wait_fd(fd, writable, timeout_ns,
                         writable ? "capstan::wait_writable" : "capstan::wait_readable");
}

}  // namespace detail

void close_fd(int fd) { rts::io_close_fd(fd); }

}  // namespace capstan
