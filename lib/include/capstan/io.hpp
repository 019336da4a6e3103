// io.hpp - the IO manager: sleeping and waiting for file descriptors park
// only the calling green thread (GHC's threadDelay, threadWaitRead).
// Built on libuv; see docs/io.md.
#pragma once

#include <chrono>

#include "capstan/errors.hpp"
#include "capstan/detail/duration.hpp"

namespace capstan {

namespace detail {
void sleep_ns(long long ns);
bool wait_fd(int fd, bool writable, long long timeout_ns);  // timeout_ns < 0: no timeout
}  // namespace detail

// sleep_for parks the calling green thread for at least `d`.
template <class Rep, class Period>
void sleep_for(const std::chrono::duration<Rep, Period>& d) {
  detail::sleep_ns(detail::to_ns(d));
}

// sleep_until parks the calling green thread until `t` has passed.
template <class Clock, class Duration>
void sleep_until(const std::chrono::time_point<Clock, Duration>& t) {
  detail::sleep_ns(detail::ns_until(t));
}

// wait_readable parks until fd is readable (or at EOF/error); io_error if
// it is closed with close_fd meanwhile.
inline void wait_readable(int fd) { detail::wait_fd(fd, false, -1); }
// wait_writable parks until fd is writable; io_error as wait_readable.
inline void wait_writable(int fd) { detail::wait_fd(fd, true, -1); }

// wait_readable_for is wait_readable with a time-out: false if it expired.
// A non-positive `d` only checks (as d == 0 always did).
template <class Rep, class Period>
bool wait_readable_for(int fd, const std::chrono::duration<Rep, Period>& d) {
  return detail::wait_fd(fd, false, detail::wait_ns(d));
}
// wait_writable_for is wait_writable with a time-out: false if it expired.
// A non-positive `d` only checks.
template <class Rep, class Period>
bool wait_writable_for(int fd, const std::chrono::duration<Rep, Period>& d) {
  return detail::wait_fd(fd, true, detail::wait_ns(d));
}

// close_fd wakes every green thread waiting on fd with io_error, then
// closes it (GHC's closeFdWith).  Close fds others may wait on only so.
// Throws usage_error for an fd a capstan::net socket owns (call its
// close()).  Ended by an exception while it waits (a kill, a timeout), it
// has still closed fd, or will: never retry it.  If the IO manager cannot
// start (no fds or threads left), it closes fd on the calling thread.
void close_fd(int fd);

}  // namespace capstan
