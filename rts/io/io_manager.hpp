// io_manager.hpp - the IO manager: timers and fd readiness for green
// threads, on one libuv loop running in a dedicated OS thread.
//
// This is the only interface to libuv in capstan: nothing else includes
// <uv.h>.  The public API (capstan/io.hpp, lib/io.cpp) and capstan::net
// (lib/net.cpp) are built on these functions.  See io_manager.cpp for the
// design (Note [One IO thread], Note [No lost wake-ups]) and docs/io.md.
#pragma once

#include <cstdint>

namespace capstan::rts {

// io_sleep parks the calling green thread for at least ns nanoseconds
// (ns > 0).  Throws usage_error off a green thread, thread_killed at shutdown.
// io_add_timeout calls on_expire(arg, token) on the IO thread once `ns`
// have passed (never at shutdown, never early); it cannot be cancelled, so
// on_expire must check that it is still wanted (mvar timeouts use the
// waiting thread's timed_seq: Note [Timed takes] in rts/mvar/mvar_core.cpp).
void io_add_timeout(long long ns, void (*on_expire)(void*, std::uint64_t) noexcept, void* arg,
                    std::uint64_t token);

void io_sleep(long long ns);

// io_wait_fd parks the calling green thread until fd is readable (writable
// if `writable`), or at EOF/error; timeout_ns < 0 waits without a
// time-out.  Returns false if the time-out expired first.  Throws io_error
// if fd is closed with io_close_fd or interrupted with io_interrupt_fd
// meanwhile, or cannot be polled.  `what`
// names the public call in errors.  `sticky`: fd is a capstan::net socket,
// always closed through io_close_fd, so its libuv handle may be kept
// between waits (Note [fd registrations]).
bool io_wait_fd(int fd, bool writable, long long timeout_ns, const char* what,
                bool sticky = false);

// io_close_fd wakes every waiter on fd with io_error, stops polling it and
// closes it; returns after the close.  Throws std::system_error if close(2)
// fails.
void io_close_fd(int fd);

// io_close_fd_nowait is io_close_fd without waiting for the close (for
// destructors, which must not block or throw).  Off a runtime, or when the
// IO manager has not started, it closes fd directly.
void io_close_fd_nowait(int fd) noexcept;

// io_interrupt_fd wakes every green thread waiting on fd with io_error
// ("fd N was closed while this thread waited on it") and fails every later
// wait on fd the same way, until fd is closed with io_close_fd or
// io_close_fd_nowait.  fd must stay open until then (Note [Interrupted
// fds]).  Does not wait; any thread.  A no-op when the IO manager has not
// started: callers make sure a waiter would have started it (io_start).
void io_interrupt_fd(int fd) noexcept;

// io_start starts the IO thread if this run has none yet; call it on a
// green thread only (the thread is stopped by io_shutdown at the end of
// the run).
void io_start();

// io_shutdown stops the IO thread, drops every pending request and frees
// the loop.  run_main calls it after the schedulers have stopped; a later
// run starts a fresh IO thread on first use.  Idempotent.
void io_shutdown() noexcept;

}  // namespace capstan::rts
