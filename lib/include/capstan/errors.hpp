// errors.hpp - the exceptions capstan throws.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace capstan {

// options_error: a malformed or unknown +RTS flag; what() names the flag and
// the accepted form.
class options_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// usage_error: the API was misused, e.g. a runtime call from an OS thread
// that is not running a green thread, or an impossible size.
class usage_error : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// thread_killed is raised in a green thread by kill_thread, and in every
// thread the runtime reclaims at shutdown (GHC's ThreadKilled).  It deliberately does not
// derive from std::exception so `catch (const std::exception&)` lets it
// pass; if you catch it with `catch (...)`, rethrow it.
struct thread_killed {};

// timeout_expired is raised inside the function that timeout() runs when
// its time is up, and caught by that same timeout() (its thread and token
// name it).  Like thread_killed it does not derive from std::exception; if
// you catch it with `catch (...)`, rethrow it.
struct timeout_expired {
  std::uint64_t thread = 0;
  std::uint64_t token = 0;
};

// blocked_indefinitely is thrown in threads blocked on an mvar that is
// destroyed, and in every blocked thread when deadlock detection finds that
// nothing can wake any of them (GHC's BlockedIndefinitelyOnMVar).
class blocked_indefinitely : public std::runtime_error {
 public:
  blocked_indefinitely() : std::runtime_error("thread blocked indefinitely in an mvar operation") {}
  // The deadlock detector's report: the message, then one line per thread
  // that was blocked (what it waited on, where), as capstan::dump_threads.
  explicit blocked_indefinitely(const std::string& report) : std::runtime_error(report) {}
};

// io_error: an fd wait ended without readiness, e.g. the fd was closed with
// close_fd while the thread waited on it.
class io_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace capstan
