// io_manager.hpp - the IO manager: timers and fd readiness for green
// threads, on one libuv loop running in a dedicated OS thread.
//
// This is the only interface to libuv in capstan: nothing else includes
// <uv.h> except the IO manager's own files (io_thread.hpp).  The public API
// of capstan/io.hpp is defined in entry_points.cpp; capstan::net (lib/net.cpp)
// is built on these functions and includes no other rts header.  See
// io_manager.cpp for the design (Note [One IO thread], Note [No lost
// wake-ups]) and docs/io.md.
#pragma once

#include <cstddef>
#include <cstdint>

namespace capstan::rts {

// io_sleep parks the calling green thread for at least ns nanoseconds
// (ns > 0).  Throws usage_error off a green thread, thread_killed at shutdown.
void io_sleep(long long ns);

// TimerRef: a timer of io_add_timeout; its holder gives it back exactly
// once, with io_cancel_timeout or io_forget_timeout (Note [Cancelling a
// timer] in io/timers.cpp).
struct [[nodiscard]] TimerRef {
  void* req = nullptr;
};

// io_add_timeout calls on_expire(arg, token) on the IO thread once `ns`
// have passed (never early, never at shutdown, never once the IO thread
// has handled its cancel).  A cancel may come too late (the expiry was
// already under way), so
// on_expire must check that it is still wanted: mvar timeouts use the
// waiting thread's timed_seq (Note [Timed takes] in rts/mvar/mvar_core.cpp).
// Green threads only.
[[nodiscard]] TimerRef io_add_timeout(long long ns,
                                      void (*on_expire)(void*, std::uint64_t) noexcept,
                                      void* arg, std::uint64_t token);

// io_cancel_timeout stops t unless it fired already and gives t back; the
// IO thread frees it at its next wake-up, which this call causes.  Green
// threads only (the IO manager is running).
void io_cancel_timeout(TimerRef t) noexcept;

// io_forget_timeout gives back t, which the caller knows has fired (its
// on_expire ran or is running): no message to the IO thread.
void io_forget_timeout(TimerRef t) noexcept;

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
// destructors, which must not block or throw); any thread.  When the IO
// manager is not running (off a runtime, before its start, or once its
// shutdown has begun) it closes fd directly.  It never allocates in a way
// that can fail (Note [Pushing from any thread]).
void io_close_fd_nowait(int fd) noexcept;

// io_claim_fd marks fd as owned by a capstan::net socket, and
// io_release_fd unmarks it before the socket pushes its close: while it is
// marked, capstan::close_fd refuses it (Note [Owned fds] in
// io/owned_fds.hpp).  Any thread; cannot fail.
bool io_claim_fd(int fd) noexcept;  // false: fd was claimed already
void io_release_fd(int fd) noexcept;

// io_interrupt_fd wakes every green thread waiting on fd with io_error
// ("fd N was closed while this thread waited on it") and fails every later
// wait on fd the same way, until fd is closed with io_close_fd or
// io_close_fd_nowait, which must come after it (Note [Interrupted fds]).
// Does not wait; any thread; cannot fail.  A no-op when the IO manager is
// not running: callers make sure a waiter would have started it (io_start),
// and at shutdown every waiter has been killed.
void io_interrupt_fd(int fd) noexcept;

// io_start starts the IO thread if this run has none yet; call it on a
// green thread only (the thread is stopped by io_shutdown at the end of
// the run).
void io_start();

// io_shutdown stops the IO thread, drops every pending request and frees
// the loop.  run_main calls it after the schedulers have stopped; a later
// run starts a fresh IO thread on first use.  Idempotent.
void io_shutdown() noexcept;

// io_parked is the number of sleeps, mvar time-outs and fd waits the IO
// thread has registered and whose threads it has not yet woken or seen
// cancel (Note [Wake-ups in flight] in io/wake_ups.cpp), and of close_fd calls
// waiting for a lingering socket's close (io/closer.hpp): a test waits on
// it to know that a thread is parked in the IO manager.  A woken thread's
// request may still be counted for a moment after the thread runs again,
// so such a test starts from a drained count (tests/parked.hpp).
std::size_t io_parked() noexcept;

// io_queued is the number of messages pushed to the IO thread and not yet
// handled (Note [Messages in flight] in io/wake_ups.cpp): read it before
// io_parked, and a request is in one count or the other.
std::size_t io_queued() noexcept;

// io_timers is the number of timers (sleeps, fd-wait and mvar time-outs,
// timeout() frames) in the IO thread's heap: tests check that cancelled
// timers leave it (Note [Timer heap]).  A relaxed count: exact once the IO
// thread has handled every message pushed before the call (for instance
// after a sleep of the caller's returned).
std::size_t io_timers() noexcept;

// io_kick_quiet wakes the IO thread once if cancels sent while shutting
// down wait for it (Note [Quiet cancels at shutdown]); the shutdown loop
// calls it after each sweep.
void io_kick_quiet() noexcept;

// io_drains is how many times the IO thread has been woken to take its
// queue, over the life of the process (for tests: Note [Quiet cancels at
// shutdown] in io_manager.cpp).
std::uint64_t io_drains() noexcept;

// For capstan::net (lib/net.cpp), which sees no scheduler internals:
// io_on_green_thread: is the caller running a green thread?
// io_others_runnable: does the caller's capability have other threads to
// run (a hint: Note [Retry before registering] in lib/net.cpp)?
bool io_on_green_thread() noexcept;
bool io_others_runnable() noexcept;

// Fault injection for tests; null (the default) injects nothing.  Plain
// pointers: a test sets one before the calls it affects, on the thread
// that makes them or before starting the threads that do.
struct IoTestHooks {
  // start_fault(step) returns a libuv error (< 0) to make that step of the
  // IO manager's start fail: "uv_loop_init", "uv_async_init",
  // "uv_timer_init", "std::thread" (any non-zero value: the thread
  // constructor throws std::system_error).
  int (*start_fault)(const char* step) = nullptr;
  // alloc_fails() true: the heap allocation of an any-thread fd message
  // fails, so the reserve is used.
  bool (*alloc_fails)() = nullptr;
  // admitted() runs in io_close_fd_nowait and io_interrupt_fd after the
  // push was admitted and before it happens.
  void (*admitted)() = nullptr;
};
extern IoTestHooks io_test_hooks;

}  // namespace capstan::rts
