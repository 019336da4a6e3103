// io_manager.cpp - the IO manager: one libuv loop on a dedicated OS thread
// serves sleeping and fd-waiting green threads of every capability.  This
// file: its life cycle (start, shutdown), the loop thread and the request
// queue.  wake_ups.cpp completes requests and wakes their threads,
// timers.cpp holds the timer heap, fd_waits.cpp the fd registrations,
// entry_points.cpp the calls that build and push requests; io_thread.hpp
// the structures they share.
//
// Policy: a green thread that sleeps or waits for an fd allocates a Request,
// pushes it to the IO thread through a lock-free MPSC queue (plus
// uv_async_send), and parks by taking the Request's one-shot mvar<int>.  The
// IO thread owns every libuv handle and every data structure of io_thread.hpp; it wakes
// the thread with mvar::try_put, which works from a plain OS thread.
//
// Rejected alternatives:
//  * One libuv loop per capability (Mio's design): see Note [One IO thread];
//    chosen against for simplicity, and the measurements in docs/io.md did
//    not show the single thread as the bottleneck of the benchmarks.
//  * Calling libuv from green threads under a lock: libuv loops are not
//    thread-safe, and the loop thread sleeps in epoll_wait holding nothing,
//    so every call would need a wake-up anyway.  Only uv_async_send is used
//    off the IO thread, as libuv requires.
//  * One uv_timer_t per sleeping thread: each needs uv_timer_init, a start,
//    and an asynchronous uv_close (its memory lives until the close
//    callback) - three operations instead of one heap push.  See Note
//    [Timer heap] in timers.cpp.
//  * A Request on the waiting thread's stack: a thread killed at shutdown
//    unwinds and frees its stack while the IO thread may still hold the
//    request.  See Note [Requests are shared].
//  * A condition variable instead of the mvar: it would block the OS thread
//    (the whole capability); the mvar parks only the green thread.
//
// Note [One IO thread]
// ~~~~~~~~~~~~~~~~~~~~
// GHC's first threaded IO manager was one Haskell thread with one epoll
// instance; Voellmy et al. ("Mio: a high-performance multicore IO manager
// for GHC", Haskell Symposium 2013) measured it as the multicore bottleneck
// (a global lock around the callback table, and every wake-up crossing
// cores) and replaced it with one epoll instance and one IO manager thread
// per capability, registering fds in one-shot mode.  capstan starts with one
// loop on one dedicated OS thread because
//  * it is simple: every libuv handle, the timer heap and the fd table are
//    owned by one thread and need no locks; requests arrive through one
//    lock-free queue (Note [No lost wake-ups]);
//  * it is not a lock: green threads never wait for the IO thread except
//    to be woken, and the wake-up is the same cross-capability mvar
//    hand-off the scheduler already makes cheap (an inbox push);
//  * this machine has two cores: per-capability loops would put two loop
//    threads next to two capabilities and the load generator.
// Measured (docs/io.md): `delay` (100,000 sleeps) and `http` under wrk at
// -N1/-N2.  The costs per wait are a queue push, at most one eventfd write
// (uv_async_send coalesces), the epoll registration and the mvar wake-up.
// Per-capability loops remain the next step if the IO thread saturates
// (each capability would poll its own loop when idle, as Mio does).
//
// Note [No lost wake-ups]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Three hand-offs, each of which cannot lose a message:
//  1. Green thread -> IO thread.  The request is pushed onto `queue_` (an
//     MpscStack, rts/primitives/mpsc_stack.hpp; the CAS is `release`,
//     publishing the request's fields)
//     *before* uv_async_send is called.  The IO thread's async callback
//     takes the whole stack with one `acquire` exchange and handles every
//     message in it (uv_async_send coalesces: many sends may produce one
//     callback, so one message per callback would strand the rest).  Only
//     the pusher that finds the stack empty sends: any message pushed onto
//     a non-empty stack is taken by the same exchange as the message below
//     it, and the pusher of the bottom message sends after its push, so a
//     callback runs after every push (libuv: "the callback is called at
//     least once after the call to uv_async_send").  A send whose messages
//     were already taken by an earlier callback only causes an empty drain.
//     The queue must therefore be empty when a run starts, and nothing may
//     be pushed once the loop is closed: Note [Pushing from any thread].
//  2. IO thread -> green thread.  The IO thread completes a request exactly
//     once (Request::done, IO-thread-owned) by try_put on its empty
//     (a close_fd of a lingering socket is completed so, once, by the
//     closing thread instead: Note [Closing a lingering socket] in
//     io/closer.hpp)
//     mvar<int>; the green thread takes it (the try_put waits for the end
//     of the libuv callback: Note [Wake last]).  If the put comes first the take
//     returns at once; if the take comes first the put serves the parked
//     taker and wakes it (Note [Waking after unlock]).  The mvar's lock
//     orders everything the IO thread wrote (err) before the take returns.
//  3. Cancellation.  A green thread whose wait is ended by an exception
//     (thread_killed out of the take, at shutdown or from kill_thread), or
//     the holder of a timer that is no longer wanted (Note [Cancelling a
//     timer] in timers.cpp), pushes the request's own cancel message, which
//     carries its reference (Note [Requests are shared]).  If the request completed
//     first, the cancel is a no-op; otherwise it stops the timer/poll.
//     Each of the two messages is pushed at most once, so the intrusive
//     `next` links never alias.
// Checked by models/io_wakeup.pml (docs/models.md).
//
// Note [Requests are shared]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A Request is created with two references: the green thread's and the IO
// thread's.  The IO thread drops its own when the request is done (finish()
// has also taken it out of the timer heap).  The green thread drops its reference after its take
// returns, or hands it to the IO thread with the cancel message when it
// unwinds; whichever side drops last deletes the request and its mvar.  So
// a killed thread leaves no dangling pointer in the IO thread, and the IO
// thread's try_put never touches a destroyed mvar.  A close_fd of a
// lingering socket has a third owner while a closing thread holds it
// (Note [Closing a lingering socket] in io/closer.hpp).
//
// Note [Pushing from any thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Green threads push only while the IO manager runs: shutdown() runs after
// every green thread has stopped.  But io_close_fd_nowait and
// io_interrupt_fd may run on any OS thread (a destructor, a close() on a
// plain thread) at any time, also during shutdown().  A push after the IO
// thread's last drain would call uv_async_send on a closed loop (its
// eventfd number may already belong to another file) and leave a message
// in the queue: the next run's first push would find the queue non-empty,
// send no wake-up (Note [No lost wake-ups] 1) and its thread would park for
// ever.  So such a push happens inside a gate, one atomic word holding
// kGateOpen plus the number of pushers inside:
//  * enter_gate: fetch_add(1), `acquire` (pairs with start()'s release of
//    kGateOpen: the loop is initialised).  If kGateOpen was clear it undoes
//    its count and the caller does without the IO thread: close(2)
//    directly (if the IO thread still holds a stopped registration of the
//    fd, its shutdown only removes the number from its own epoll set, where
//    no other file of the loop can have it), and an interrupt has nobody
//    to wake (every waiter has been killed);
//  * leave_gate: fetch_sub(1), `release`: the push and its uv_async_send
//    happen before shutdown's acquire load that sees the word at zero;
//  * shutdown() clears kGateOpen (fetch_and, acq_rel), then waits, yielding,
//    until the word is zero.  Only then does it stop the IO thread, whose
//    last drain therefore takes every admitted message.
// All are read-modify-writes of one word, so they are totally ordered: a
// pusher either enters before the clearing (and shutdown waits for it) or
// finds the gate closed.  A pusher stays inside for an allocation and a
// push, so the wait is short.
// Checked by models/io_wakeup.pml (docs/models.md).
// The two calls are noexcept, as destructors need, and must not lose their
// message when memory is short: if new fails, the Request comes from a
// fixed reserve of kReserve slots, each claimed with a CAS (acquire) and
// given back by release() (a release store); with every slot in use the
// pusher yields until the IO thread, which never waits for a pusher,
// returns one.
#include "io/io_thread.hpp"
#include "io/owned_fds.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <system_error>

#include "capstan/errors.hpp"
#include "primitives/say.hpp"
#include "runtime/runtime.hpp"
#include "thread/dump.hpp"
#include "trace/trace.hpp"
#include "primitives/clock.hpp"

namespace capstan::rts {

IoTestHooks io_test_hooks;

namespace iomgr {

// Never destroyed, as the Runtime is not (Note [Exit inside run] in
// runtime/runtime.cpp): a green thread may use it while std::exit runs the
// static destructors.
namespace {
union IoSlot {
  IoSlot() : io() {}
  ~IoSlot() {}
  IoManager io;
};
IoSlot io_slot;
}  // namespace
constinit IoManager& io = io_slot.io;

int injected_fault(const char* step) noexcept {
  auto* f = io_test_hooks.start_fault;
  return f ? f(step) : 0;
}

void Request::release() noexcept {
  if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (reserve_slot >= 0) io.free_reserved(reserve_slot);
    else delete this;
  }
}

namespace {

[[noreturn]] void start_failed(const char* step, int uv_err) {
  throw std::system_error(-uv_err, std::generic_category(),
                          fmt::format("capstan: cannot start the IO manager: {} failed: {}", step,
                                      uv_strerror(uv_err)));
}

}  // namespace

// Note [libuv's process-wide set-up]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// uv_loop_init takes four fds: its epoll fd, a pipe for its signal
// handling, and the eventfd that wakes the loop.  The first uv_loop_init of
// a process also runs libuv's one-time global set-up (uv_once), which makes
// another pipe and calls abort() if it cannot.  And when a step fails
// part-way, libuv 1.44's uv_loop_init keeps what the earlier steps opened:
// with three to five fds free the first start kept 3 (the epoll fd and the
// signal pipe) for good, a later run's start with few free kept 1, so a
// server retrying under fd pressure lost fds with each attempt.  So start
// first makes sure the fds uv_loop_init will take can be had - 4, and 6
// until a loop has once been initialised - and gives them back: without
// them it fails like any other step, with EMFILE and a message, having
// kept nothing, and a later call tries again.  What is left is a window of
// a few instructions in which another thread of the program could take the
// last fds.  Tested by tests/rts/io/io_first_start_test.cpp, in fresh
// processes.
namespace {
std::atomic<bool> g_uv_set_up{false};  // a uv_loop_init has succeeded in this process
}  // namespace

// start is all or nothing: every libuv result is checked, and a failure at
// any step (or the thread constructor throwing) closes what was initialised
// and frees the loop before the exception leaves, so a later call can
// start afresh.
void IoManager::start() {
  std::lock_guard<std::mutex> g(life_mu_);
  if (started_.load(std::memory_order_relaxed)) return;
  int rc = injected_fault("uv_loop_init");
  if (rc == 0) {  // See Note [libuv's process-wide set-up]
    const int need = g_uv_set_up.load(std::memory_order_relaxed) ? 4 : 6;
    int probe[6] = {-1, -1, -1, -1, -1, -1};
    if (::pipe2(probe, O_CLOEXEC) != 0) {
      rc = -errno;
    } else {
      for (int i = 2; i < need && rc == 0; ++i)
        if ((probe[i] = ::fcntl(probe[0], F_DUPFD_CLOEXEC, 0)) < 0) rc = -errno;
    }
    for (int fd : probe)
      if (fd >= 0) ::close(fd);
  }
  if (rc == 0) rc = uv_loop_init(&loop_);
  if (rc != 0) start_failed("uv_loop_init", rc);
  g_uv_set_up.store(true, std::memory_order_relaxed);
  bool async_ok = false, timer_ok = false;
  try {
    rc = injected_fault("uv_async_init");
    if (rc == 0) rc = uv_async_init(&loop_, &async_, &IoManager::on_async);
    if (rc != 0) start_failed("uv_async_init", rc);
    async_ok = true;
    rc = injected_fault("uv_timer_init");
    if (rc == 0) rc = uv_timer_init(&loop_, &timer_);
    if (rc != 0) start_failed("uv_timer_init", rc);
    timer_ok = true;
    // +RTS --dump-on-sigquit: libuv turns the signal into a callback on
    // this loop's thread, where dumping is safe (no async-signal context).
    if (rt.opts.dump_on_sigquit) {
      rc = uv_signal_init(&loop_, &sigquit_);
      if (rc != 0) start_failed("uv_signal_init", rc);
      sigquit_ok_ = true;
      rc = uv_signal_start(&sigquit_, &IoManager::on_sigquit, SIGQUIT);
      if (rc != 0) start_failed("uv_signal_start(SIGQUIT)", rc);
    }
    // +RTS -l: the loop's waits in the kernel, from libuv's own idle-time
    // count (prepare runs just before the poll, check just after).
    if (rt.tracing) {
      uv_loop_configure(&loop_, UV_METRICS_IDLE_TIME);
      uv_prepare_init(&loop_, &prepare_);
      uv_check_init(&loop_, &check_);
      uv_prepare_start(&prepare_, &IoManager::on_prepare);
      uv_check_start(&check_, &IoManager::on_check);
      tracing_ok_ = true;
    }
    loop_.data = this;
    stopping_.store(false, std::memory_order_relaxed);
    armed_for_ = -1;
    try {
      if (injected_fault("std::thread") != 0)
        throw std::system_error(EAGAIN, std::generic_category(), "injected");
      thread_ = std::thread([this] { thread_main(); });
      // Note [Owned fds]: marked once the thread runs (a failed start has closed them).
      const int own[4] = {uv_backend_fd(&loop_), loop_.async_io_watcher.fd, loop_.signal_pipefd[0],
                          loop_.signal_pipefd[1]};
      for (int i = 0; i < 4; ++i) own_fds_[i] = own[i] >= 0 && owned_fds().claim(own[i]) ? own[i] : -1;
    } catch (const std::system_error& e) {
      throw std::system_error(e.code(), "capstan: cannot start the IO manager: std::thread "
                                        "(its OS thread) failed");
    }
  } catch (...) {
    if (async_ok) uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
    if (timer_ok) uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
    if (sigquit_ok_) uv_close(reinterpret_cast<uv_handle_t*>(&sigquit_), nullptr);
    sigquit_ok_ = false;
    close_trace_handles();
    uv_run(&loop_, UV_RUN_NOWAIT);  // runs the close callbacks
    if (int crc = uv_loop_close(&loop_); crc != 0)
      say("capstan: internal error: uv_loop_close after a failed start: {}\n",
                 uv_strerror(crc));
    throw;
  }
  // release: pairs with enter_gate's acquire (Note [Pushing from any thread]).
  // The gate opens first: a green thread that sees started_ may park on a
  // connection at once, and a plain OS thread's close() of it then pushes
  // an interrupt, which a gate still shut would drop (the waiter parked
  // until the peer sent something).
  gate_.fetch_or(kGateOpen, std::memory_order_release);
  started_.store(true, std::memory_order_release);
}

void IoManager::thread_main() {
  pthread_setname_np(pthread_self(), "capstan-io");
  if (rt.tracing) trace_bind_io_thread();  // Note [Wake-up flows]
  uv_run(&loop_, UV_RUN_DEFAULT);  // returns once stop_everything closed all handles
}

bool IoManager::enter_gate() noexcept {
  // acquire: see Note [Pushing from any thread].
  if (gate_.fetch_add(1, std::memory_order_acquire) & kGateOpen) return true;
  gate_.fetch_sub(1, std::memory_order_relaxed);  // refused: we pushed nothing
  return false;
}

void IoManager::leave_gate() noexcept {
  gate_.fetch_sub(1, std::memory_order_release);  // Note [Pushing from any thread]
}

Request* IoManager::new_fd_request(Op kind, int fd) noexcept {
  Request* r = nullptr;
  auto* fails = io_test_hooks.alloc_fails;
  if (!(fails && fails())) r = new (std::nothrow) Request;
  if (!r) {  // Note [Pushing from any thread]: the reserve
    for (int i = 0;; i = (i + 1) % kReserve) {
      bool expected = false;
      // acquire: pairs with free_reserved's release, so the IO thread's
      // last use of the slot happened before we reuse it.
      if (!reserve_used_[i].load(std::memory_order_relaxed) &&
          reserve_used_[i].compare_exchange_strong(expected, true, std::memory_order_acquire,
                                                   std::memory_order_relaxed)) {
        r = &reserve_[i];
        r->reserve_slot = i;
        break;
      }
      if (i == kReserve - 1) std::this_thread::yield();
    }
    r->done = r->counted = false;
    r->heap_index = kNotInHeap;
    r->prev = r->next = nullptr;
    r->entry = nullptr;
    r->err = 0;
  }
  r->kind = kind;
  r->submit.req = r;
  r->submit.op = kind;
  r->fd = fd;
  r->refs.store(1, std::memory_order_relaxed);  // nobody waits: the IO thread's only
  return r;
}

void IoManager::free_reserved(int slot) noexcept {
  reserve_used_[slot].store(false, std::memory_order_release);
}

void IoManager::shutdown() noexcept {
  std::lock_guard<std::mutex> g(life_mu_);
  if (!started_.load(std::memory_order_relaxed)) return;
  // Refuse any-thread pushes, and wait out those inside the gate (Note
  // [Pushing from any thread]).  acq_rel / acquire: see the Note.
  gate_.fetch_and(~kGateOpen, std::memory_order_acq_rel);
  while (gate_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  // seq_cst store, then the send: the callback it causes sees the flag.
  stopping_.store(true, std::memory_order_seq_cst);
  uv_async_send(&async_);
  thread_.join();
  closer_.stop();  // the lingering closes still queued: Note [Closing a lingering socket]
  // Every push happened before the last drain: green threads stopped
  // before shutdown began, any-thread pushes are fenced by the gate.
  if (queue_.maybe_nonempty() || quiet_.maybe_nonempty()) {
    say("capstan: internal error: a message reached the IO manager after its "
                       "last drain\n");
    std::abort();
  }
  for (int fd : own_fds_)  // unmarked before the loop closes them: Note [Owned fds]
    if (fd >= 0) owned_fds().release(fd);
  if (int rc = uv_loop_close(&loop_); rc != 0)
    say("capstan: internal error: uv_loop_close at shutdown: {}\n",
               uv_strerror(rc));
  started_.store(false, std::memory_order_release);
}

void IoManager::on_async(uv_async_t* a) {
  auto* self = static_cast<IoManager*>(a->loop->data);
  // The flag first, then the drain: shutdown() sets it only after every
  // green thread has stopped and the gate is shut, so a drain after seeing
  // it takes every message ever pushed.  (Drain-then-check lost a close
  // pushed between the two.)
  bool stop = self->stopping_.load(std::memory_order_seq_cst);
  self->drains_.store(self->drains_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  self->drain();
  if (stop) self->stop_everything();
  self->flush_wakes();
}

// Note [Quiet cancels at shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At shutdown every thread blocked in a sleep or an fd wait is killed, and
// each sends a cancel as it unwinds (Note [No lost wake-ups] 3).  With the
// IO thread draining faster than they come, every cancel found the queue
// empty and paid an eventfd write and a wake-up of the IO thread: about a
// fifth of `shutdown 100000 -N1`'s exit (perf: eventfd_write 9-11 % of the
// main thread's samples).  No thread waits for its cancel, and shutdown()
// drains everything before it closes the loop, so while the runtime shuts
// down a cancel goes on quiet_ without a send, and the next drain takes it.
// One party does watch them: shutdown's test for threads that nothing can
// wake (Note [Blocked while unwinding]) sees a request as live until its
// cancel is handled.  So the shutdown loop kicks the IO thread after each
// sweep (io_kick_quiet: one send, if any cancel waits) - a wake-up per
// sweep instead of one per cancel.
// Order: a cancel must be handled after its submit.  drain takes quiet_
// *before* queue_, and handles queue_'s messages first: a cancel on quiet_
// was pushed after its submit, so its submit was on queue_ before that
// exchange, and is handled by this drain or was by an earlier one.  A
// cancel may be handled after *later* messages on queue_, though; the
// only later message that touches its request's fd is a close (harmless:
// the close ends the wait first) or, if the program closed the fd with
// close(2) and a thread unwinding at shutdown waits on the reused number,
// a new wait that shares the old entry until the cancel arrives.  A cancel
// taken late meets a request that may have completed meanwhile: the same
// race as an ordinary cancel's, settled by the request's reference count.
void IoManager::drain() {
  // Quiet cancels first, then the queue: see Note [Quiet cancels at shutdown].
  Msg* quiet = quiet_.take_all_fifo();
  // take_all_fifo: the acquire exchange pairs with push's release; arrival
  // order puts a submit before its cancel, an interrupt before its close.
  Msg* m = queue_.take_all_fifo();
  std::size_t handled = 0;
  for (Msg* list : {m, quiet}) {
    while (list) {
      Msg* n = list->next;  // handle() may free the message's request
      handle(list);
      list = n;
      ++handled;
    }
  }
  // After handle() counted the new requests in parked_: Note [Messages in flight].
  if (handled != 0) queued_.fetch_sub(handled, std::memory_order_seq_cst);
  rearm_timer();
}

void IoManager::handle(Msg* m) {
  Request* r = m->req;
  switch (m->op) {
    case Op::sleep:
    case Op::timeout:
      add_timer(r);
      count_parked(r);
      break;
    case Op::wait_fd:
      start_wait(r);
      if (!r->done && r->deadline >= 0) add_timer(r);
      count_parked(r);
      break;
    case Op::close_fd:
    case Op::close_fd_nowait:
      do_close(r);
      break;
    case Op::interrupt_fd:
      do_interrupt(r);
      break;
    case Op::cancel:
      // A killed sleeper or fd waiter, or io_cancel_timeout: a no-op if r
      // fired first (Note [Cancelling a timer]).
      finish_and_update(r, kReady, /*wake=*/false);  // nobody takes any more
      r->release();  // the holder's reference, carried by the message
      break;
  }
}

// stop_everything ends the loop: every handle is closed, every request
// dropped without a wake-up (their threads are gone: run_main calls
// shutdown() after the schedulers stopped).
void IoManager::stop_everything() {
  drop_fds();
  drop_timers();
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
  if (sigquit_ok_) uv_close(reinterpret_cast<uv_handle_t*>(&sigquit_), nullptr);
  sigquit_ok_ = false;
  close_trace_handles();
}

void IoManager::on_sigquit(uv_signal_t*, int) { dump_all_threads(stderr, "SIGQUIT"); }

void IoManager::close_trace_handles() noexcept {
  if (!tracing_ok_) return;
  uv_close(reinterpret_cast<uv_handle_t*>(&prepare_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
  tracing_ok_ = false;
}

void IoManager::on_prepare(uv_prepare_t* p) {
  auto* self = static_cast<IoManager*>(p->loop->data);
  self->wait_start_ns_ = trace_now();
  self->idle_before_ = uv_metrics_idle_time(p->loop);
}

void IoManager::on_check(uv_check_t* c) {
  auto* self = static_cast<IoManager*>(c->loop->data);
  auto waited = static_cast<std::int64_t>(uv_metrics_idle_time(c->loop) - self->idle_before_);
  if (self->wait_start_ns_ != 0) trace_io_wait(self->wait_start_ns_, waited);
}

}  // namespace iomgr
}  // namespace capstan::rts
