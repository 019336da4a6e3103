// entry_points.cpp - the IO manager's calls: each builds a Request, pushes
// it to the IO thread and, for a green thread, parks on its mvar
// (io_manager.cpp, Note [No lost wake-ups]); also the public calls of
// capstan/io.hpp, which name themselves in errors and handle the cases that
// need no IO thread, and the two scheduler queries capstan::net needs.
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <system_error>

#include "capstan/errors.hpp"
#include "capstan/io.hpp"
#include "capstan/thread.hpp"
#include "primitives/clock.hpp"
#include "io/closer.hpp"
#include "io/io_thread.hpp"
#include "io/owned_fds.hpp"
#include "schedule/raise_killed.hpp"
#include "schedule/schedule.hpp"

// The IO manager's view into mvar<int> (its friend): the box's wait without
// the throw, so that await (below) throws after its own clean-up.
struct capstan::detail::mvar_access {
  static bool take_wait(mvar<int>& m, std::optional<int>& dest, waiter& w) {
    return m.take_wait(dest, w);
  }
  // The IO thread fills the box: its lock is never biased (Note [Biased
  // locks] in capstan/detail/mvar_core.hpp).
  static void share(mvar<int>& m) noexcept { m.core_.share(); }
};

namespace capstan::rts {
namespace {

using iomgr::io;
using iomgr::Op;
using iomgr::Request;

std::int64_t deadline_after(long long ns) {
  std::int64_t now = now_ns();
  if (ns > std::numeric_limits<std::int64_t>::max() - now) return std::numeric_limits<std::int64_t>::max();
  return now + ns;
}

// send_cancel hands the IO thread our reference to r with its cancel (r's
// wait ended without its outcome: an exception).  Note [No lost wake-ups]
// 3; Note [Quiet cancels at shutdown].
void send_cancel(Request* r) noexcept {
  if (rt.shutting_down.load(std::memory_order_relaxed)) io.push_quiet(&r->cancel);
  else io.push(&r->cancel);
}


// await parks on r's mvar: true with the outcome in r->taken, false if an
// exception ended the wait - the caller then returns raise_cancelled(r),
// which hands its reference to the IO thread with the cancel and raises
// the exception.
//
// Most threads that unwind through here are being killed at shutdown,
// and what a kill costs is the unwinder's work per frame: about 550 ns
// for a frame it must stop in (a landing pad, then _Unwind_Resume), less
// for one it passes, and less again for a frame with no cleanups at all
// (Note [A kill's frames have no cleanups] in mvar/mvar_core.cpp).  So the
// cancel is sent before the raise, from a frame with no cleanups: the
// guard that cancels when an exception is due before the thread blocks
// (thrown from inside the wait) lives in wait_box's frame, which is gone
// by then.  It was a catch-and-rethrow first (the rethrow searched the
// stack a second time), then a destructor (a landing pad and a resume per
// kill): callgrind, `shutdown` -N1, per kill: 33,450 instructions with the
// destructor; then the guard in the blocking call's frame (an LSDA the
// personality routine parsed in both phases).
//
// Note [A killed IO wait leaves no frame]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A killed sleeper's or fd waiter's raise could start in the user's own
// frame, as a killed mvar waiter's does (raise_outcome jumps to
// raise_killed: Note [Raising thread_killed in one walk] in
// schedule/raise_killed.cpp), if io_sleep and io_wait_fd could jump too.
// A C++ compiler makes a call in tail position a jump only if nothing in
// the caller's frame may be reached through a pointer the callee might
// hold - and the wait's waiter and the optional it fills had their
// addresses published (the mvar's queue, Thread::waiter).  So they live
// in the Request (Request::wait, Request::taken), the blocking calls keep
// nothing in their frames, and each returns raise_cancelled(r), which
// reads the outcome, sends the cancel and returns the kill's raise: two
// jumps, and the walk goes from raise_killed to the user's frame
// (detail::sleep_ns and detail::wait_fd jump to io_sleep and io_wait_fd
// already).  Callgrind, `shutdown` (per thread, 10000 less 5000, -N1):
// 16,349 -> 14,488 instructions, FDE lookups per kill 6.67 -> 6.00.
[[gnu::noinline]] bool wait_box(Request* r, Thread* me) {
  struct CancelOnThrow {
    Request* r;
    Thread* me;
    bool returned = false;
    ~CancelOnThrow() {
      me->io_wait = IoWait::none;
      if (!returned) send_cancel(r);
    }
  };
  CancelOnThrow guard{r, me};
  bool served = detail::mvar_access::take_wait(r->box, r->taken, r->wait);
  guard.returned = true;
  return served;
}

[[gnu::always_inline]] inline bool await(Request* r, IoWait what, std::int64_t arg) {
  Thread* me = green_task()->cap->current;  // callers checked: a green thread
  me->io_wait = what;
  me->io_arg = arg;
  return wait_box(r, me);
}

// raise_not_killed raises what ended a wait other than a kill (the
// exception thrown to the thread), for raise_cancelled.
[[noreturn, gnu::cold, gnu::noinline]] void raise_not_killed(detail::waiter::outcome_t o,
                                                             Thread* t) {
  detail::waiter w;
  w.outcome = o;
  w.thread = t;
  detail::mvar_core::raise_outcome(w);  // interrupted: the exception thrown to us
  // served, timed_out: not how an untimed wait on a Request's box, which
  // nobody destroys while it is waited on, ends without a value.
  throw blocked_indefinitely{};
}

// raise_cancelled ends a wait that an exception ended: reads what ended it,
// gives the IO thread our reference to r with its cancel, and raises.
// Declared as returning bool (it never returns) so that the blocking calls,
// void or bool, can jump to it: Note [A killed IO wait leaves no frame].
[[gnu::cold, gnu::noinline]] bool raise_cancelled(Request* r) {
  const detail::waiter::outcome_t o = r->wait.outcome;  // r is the IO thread's once cancelled
  Thread* t = r->wait.thread;
  send_cancel(r);
  if (o == detail::waiter::killed || o == detail::waiter::kill_raised)
    return raise_killed(o == detail::waiter::kill_raised);
  raise_not_killed(o, t);
}

Request* new_request(Op kind) {
  auto* r = new Request;
  detail::mvar_access::share(r->box);
  r->kind = kind;
  r->submit.req = r;
  r->submit.op = kind;
  r->cancel.req = r;
  r->cancel.op = Op::cancel;
  return r;
}

// push_fd_message sends an fd message from any thread, or returns false if
// the IO manager is not running (Note [Pushing from any thread]).
bool push_fd_message(Op kind, int fd) noexcept {
  if (!io.enter_gate()) return false;
  if (auto* admitted = io_test_hooks.admitted) admitted();
  io.push(&io.new_fd_request(kind, fd)->submit);
  io.leave_gate();
  return true;
}

}  // namespace

TimerRef io_add_timeout(long long ns, void (*on_expire)(void*, std::uint64_t) noexcept,
                        void* arg, std::uint64_t token) {
  io.ensure_started();
  io.throttle();  // Note [Cancelling a timer], backpressure
  Request* r = new_request(Op::timeout);  // two references: Note [Cancelling a timer]
  r->deadline = deadline_after(ns);
  r->on_expire = on_expire;
  r->arg = arg;
  r->token = token;
  io.push(&r->submit);
  return TimerRef{r};
}

void io_cancel_timeout(TimerRef t) noexcept {
  io.push(&static_cast<Request*>(t.req)->cancel);  // carries our reference
}

void io_forget_timeout(TimerRef t) noexcept { static_cast<Request*>(t.req)->release(); }

void io_sleep(long long ns) {
  require_green_thread("capstan::sleep_for");
  io.ensure_started();
  Request* r = new_request(Op::sleep);
  r->deadline = deadline_after(ns);
  io.push(&r->submit);
  if (!await(r, IoWait::sleep, r->deadline)) [[unlikely]] {
    raise_cancelled(r);  // a jump: Note [A killed IO wait leaves no frame]
    return;
  }
  r->release();
}

namespace {

// The failures of io_wait_fd, thrown from functions of their own: their
// messages are strings, whose clean-up would give io_wait_fd's frame - on
// the stack of every fd waiter killed at shutdown - an LSDA (Note [A
// kill's frames have no cleanups] in mvar/mvar_core.cpp).
[[noreturn, gnu::cold, gnu::noinline]] void throw_not_an_fd(const char* what, int fd) {
  throw usage_error(fmt::format("{}: fd {} is not a file descriptor", what, fd));
}
[[noreturn, gnu::cold, gnu::noinline]] void throw_wait_failed(const char* what, int fd,
                                                              int outcome, int err) {
  switch (outcome) {
    case iomgr::kClosed:
      throw io_error(fmt::format(
          "{}: fd {} was closed by close_fd while this thread waited on it", what, fd));
    case iomgr::kInterrupted:
      throw io_error(fmt::format("{}: fd {} was closed while this thread waited on it", what, fd));
    default:
      throw io_error(fmt::format("{}: cannot poll fd {}: {}", what, fd, uv_strerror(err)));
  }
}

}  // namespace

bool io_wait_fd(int fd, bool writable, long long timeout_ns, const char* what, bool sticky) {
  require_green_thread(what);
  if (fd < 0) throw_not_an_fd(what, fd);
  if (timeout_ns == 0) {  // a check, not a wait
    struct pollfd p {fd, static_cast<short>(writable ? POLLOUT : POLLIN), 0};
    int n = ::poll(&p, 1, 0);
    detail::safe_point();
    if (n > 0 && (p.revents & POLLNVAL))  // not open: as the wait below reports it
      throw_wait_failed(what, fd, iomgr::kFailed, UV_EBADF);
    return n > 0;  // ready, or an error (POLLERR, POLLHUP) the caller's IO will report;
                   // poll's own failure (EINTR) is "not ready yet"
  }
  io.ensure_started();
  Request* r = new_request(Op::wait_fd);
  r->fd = fd;
  r->writable = writable;
  r->sticky = sticky;
  r->deadline = timeout_ns < 0 ? -1 : deadline_after(timeout_ns);
  io.push(&r->submit);
  if (!await(r, writable ? IoWait::fd_write : IoWait::fd_read, fd)) [[unlikely]]
    return raise_cancelled(r);  // a jump: Note [A killed IO wait leaves no frame]
  int outcome = *r->taken;
  int err = r->err;
  r->release();
  if (outcome == iomgr::kReady) return true;
  if (outcome == iomgr::kTimedOut) return false;
  throw_wait_failed(what, fd, outcome, err);
}

void io_close_fd(int fd) {
  require_green_thread("capstan::close_fd");
  if (fd < 0)
    throw usage_error(fmt::format("capstan::close_fd: fd {} is not a file descriptor", fd));
  Request* r;
  try {
    io.ensure_started();
    r = new_request(Op::close_fd);
  } catch (...) {
    // No IO manager (it could not start: no fds, no thread) or no memory
    // for the request.  The fd is closed all the same, without waiting:
    // its owner has let go of it (a connection marked closed never closes
    // it again), so a close that gave up here would leak it for good, and
    // one that threw would invite a retry that closes whatever file reuses
    // the number.  io_close_fd_nowait closes it here when the IO manager
    // is not running (nothing of its can hold the fd), else hands it over
    // without allocating; an error of that close(2) goes unreported.
    io_close_fd_nowait(fd);
    return;
  }
  r->fd = fd;
  io.push(&r->submit);
  if (!await(r, IoWait::close_fd, fd)) [[unlikely]] {
    raise_cancelled(r);
    return;
  }
  int err = r->err;
  r->release();
  if (err != 0)
    throw std::system_error(err, std::generic_category(),
                            fmt::format("capstan::close_fd: close(fd {})", fd));
}

void io_close_fd_nowait(int fd) noexcept {
  if (fd < 0) return;
  if (push_fd_message(Op::close_fd_nowait, fd)) return;
  // The IO manager is not running.  From a green thread that means it has
  // not started yet in this run (shutdown stops it only after the last
  // green thread), and a lingering socket's close would hold the
  // capability for its linger time: start the IO manager and hand the
  // close over (Note [Closing a lingering socket] in io/closer.hpp).  If
  // it cannot start, or on a plain OS thread, close here.
  if (green_task() != nullptr && iomgr::Closer::may_linger(fd)) {
    try {
      io.ensure_started();
    } catch (...) {  // no fds or no thread to start it with
    }
    if (push_fd_message(Op::close_fd_nowait, fd)) return;
  }
  ::close(fd);
}

bool io_claim_fd(int fd) noexcept { return owned_fds().claim(fd); }

void io_release_fd(int fd) noexcept { owned_fds().release(fd); }

void io_interrupt_fd(int fd) noexcept {
  // Nothing can wait on fd unless the IO manager runs: the waiter starts it
  // (io_start) before it counts itself as a user of the fd, so a closer
  // that saw the count finds the gate open, unless shutdown has begun, and
  // then every waiter has been killed.
  if (fd >= 0) push_fd_message(Op::interrupt_fd, fd);
}

void io_start() { io.ensure_started(); }

void io_shutdown() noexcept { io.shutdown(); }

std::size_t io_parked() noexcept { return io.parked(); }

std::size_t io_timers() noexcept { return io.timers(); }

std::uint64_t io_drains() noexcept { return io.drains(); }

void io_kick_quiet() noexcept { io.kick_quiet(); }

std::size_t io_queued() noexcept { return io.queued(); }

bool io_on_green_thread() noexcept { return green_task() != nullptr; }

bool io_others_runnable() noexcept {
  Task* t = green_task();
  return t && has_threads(t->cap);
}

}  // namespace capstan::rts

// ---------------------------------------------------------------- capstan/io.hpp

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

void close_fd(int fd) {
  // Note [Owned fds]: the socket would close it again later; the IO
  // manager's loop holds it.
  if (rts::owned_fds().owned(fd))
    throw usage_error(fmt::format(
        "capstan::close_fd: fd {} belongs to a capstan::net connection or listener, or is held by "
        "the runtime's IO manager for its event loop; its owner closes it itself (for a socket, "
        "call its close(); closing it here too would close it twice, the second time under "
        "whatever file the number names by then)",
        fd));
  rts::io_close_fd(fd);
}

}  // namespace capstan
