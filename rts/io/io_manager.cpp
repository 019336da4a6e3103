// io_manager.cpp - the IO manager: one libuv loop on a dedicated OS thread
// serves sleeping and fd-waiting green threads of every capability.
//
// Policy: a green thread that sleeps or waits for an fd allocates a Request,
// pushes it to the IO thread through a lock-free MPSC queue (plus
// uv_async_send), and parks by taking the Request's one-shot mvar<int>.  The
// IO thread owns every libuv handle and every data structure below; it wakes
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
//    [Timer heap].
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
//  1. Green thread -> IO thread.  The request is pushed onto `inbox_` (a
//     Treiber stack; the CAS is `release`, publishing the request's fields)
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
//  2. IO thread -> green thread.  The IO thread completes a request exactly
//     once (Request::done, IO-thread-owned) by try_put on its empty
//     mvar<int>; the green thread takes it (the try_put waits for the end
//     of the libuv callback: Note [Wake last]).  If the put comes first the take
//     returns at once; if the take comes first the put serves the parked
//     taker and wakes it (Note [Waking after unlock]).  The mvar's lock
//     orders everything the IO thread wrote (err) before the take returns.
//  3. Cancellation.  A green thread killed at shutdown (thread_killed out of
//     the take) pushes the request's own cancel message, which carries its
//     reference (Note [Requests are shared]).  If the request completed
//     first, the cancel is a no-op; otherwise it stops the timer/poll.
//     Each of the two messages is pushed at most once, so the intrusive
//     `next` links never alias.
//
// Note [Requests are shared]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A Request is created with two references: the green thread's and the IO
// thread's.  The IO thread drops its own when the request is done *and* out
// of the timer heap (in_heap), so a lazily deleted heap entry never points
// at freed memory.  The green thread drops its reference after its take
// returns, or hands it to the IO thread with the cancel message when it
// unwinds; whichever side drops last deletes the request and its mvar.  So
// a killed thread leaves no dangling pointer in the IO thread, and the IO
// thread's try_put never touches a destroyed mvar.
//
// Note [Wake last]
// ~~~~~~~~~~~~~~~~
// finish() marks a request done and unlinks it, but does not wake its
// thread: it queues the wake-up in `wakes_`, and each libuv callback
// (on_async, on_timer, on_poll) ends with flush_wakes(), after every poll
// mask update, handle close and close(2) of that callback.  A woken thread
// may at once close(2) its fd, or free the request:
//  * so the IO thread must not touch the fd afterwards.  Waking before
//    update_poll let the woken thread close the fd while the IO thread
//    still removed it from epoll (a race TSan reported; with the number
//    reused meanwhile, the epoll_ctl would hit an unrelated file);
//  * so the IO thread must not touch the request afterwards.  A queued
//    wake-up holds its own reference, dropped after the try_put, so code
//    that runs between finish() and the flush may still read the request.
//    (handle() reads r->done after start_wait, which may have finished r:
//    when finish() woke and released at once, the woken thread could free
//    r first - the heap-use-after-free ASan reported for a wait on a
//    regular file.)
// The mask update itself may still be lazy: libuv applies a narrowed
// uv_poll_start mask at the next epoll_wait.  Only a handle that is
// stopped or closed is removed from epoll at once; that is the case that
// matters, the last waiter of the fd leaving (docs/io.md, plain close(2)).
//
// Note [Timer heap]
// ~~~~~~~~~~~~~~~~~
// All deadlines (sleeps and fd-wait time-outs) sit in one binary min-heap
// on the IO thread, ordered by (deadline, arrival), with a single
// uv_timer_t armed for the earliest.  A request that completes otherwise
// (readiness, close_fd, cancel) stays in the heap, marked done, and is
// skipped when it reaches the top; when done entries outnumber live ones the
// heap is rebuilt.  libuv's timers have millisecond resolution and fire
// when its cached millisecond clock reaches the due time, which can be up
// to a millisecond before our nanosecond deadline, so the callback compares
// deadlines with the monotonic clock and re-arms for what is not yet due:
// a sleep never ends early.  Expired requests are all woken in one callback
// (one batch per loop iteration).
//
// Note [fd registrations]
// ~~~~~~~~~~~~~~~~~~~~~~~
// libuv allows one uv_poll_t per fd, so every fd being waited on has one
// FdEntry holding the handle and two waiter lists (readable, writable); the
// handle's event mask is the union of what the waiters want, updated as
// they come and go.  uv_poll is level-triggered: a woken waiter is removed
// at once, so the fd is not reported again until someone waits again.  When
// the last waiter leaves, the handle is closed, unless the fd is `sticky`:
// fds owned by capstan::net, which are always closed through close_fd, keep
// their (stopped) handle and skip uv_poll_init's fcntl and epoll probes on
// the next wait.  A user fd is never kept: after a plain close(2) its number
// may come back as a regular file, which epoll rejects (libuv aborts when a
// registration it believes valid fails).  close_fd runs on the IO thread:
// finish every waiter with `closed`, stop and close the handle, close(2),
// and only then wake them (Note [Wake last]) - in that order, so no waiter
// can be woken by a later fd reusing the number, and epoll never holds a
// closed fd.  uv_poll_init also makes the fd
// non-blocking (documented in docs/io.md).  Regular files cannot be polled
// (EPERM) and never block: a wait on one returns at once.
#include "io/io_manager.hpp"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>
#include <uv.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "capstan/errors.hpp"
#include "capstan/io.hpp"
#include "capstan/mvar.hpp"
#include "primitives/clock.hpp"
#include "schedule/schedule.hpp"

namespace capstan::rts {
namespace {

struct Request;
struct FdEntry;

enum class Op : std::uint8_t { sleep, wait_fd, close_fd, close_fd_nowait, interrupt_fd, cancel, timeout };

// How a request ended: the value put into its mvar.
enum Outcome : int {
  kReady = 0,     // the sleep ended / the fd is ready / close_fd closed it
  kTimedOut = 1,  // a wait_fd time-out expired first
  kClosed = 2,    // close_fd closed the fd under the waiter
  kFailed = 3,    // libuv could not poll the fd (Request::err)
  kInterrupted = 4,  // io_interrupt_fd: the fd's owner is closing it
};

// One message to the IO thread: a request's submission or its cancellation.
struct Msg {
  Msg* next = nullptr;  // the inbox link; written only by the pusher
  Request* req = nullptr;
  Op op = Op::sleep;
};

struct Request {
  // Written by the green thread before the push, read-only afterwards.
  Msg submit;
  Msg cancel;
  Op kind = Op::sleep;
  bool writable = false;
  bool sticky = false;  // Note [fd registrations]
  int fd = -1;
  std::int64_t deadline = -1;  // steady-clock ns; -1: none
  // Op::timeout: called on the IO thread when the deadline passes (and not
  // at shutdown).  Nobody waits on box; the IO thread holds the only reference.
  void (*on_expire)(void* arg, std::uint64_t token) noexcept = nullptr;
  void* arg = nullptr;
  std::uint64_t token = 0;

  // The IO thread's: never touched by the green thread.
  bool done = false;     // completed or cancelled (Note [No lost wake-ups] 2)
  bool in_heap = false;  // a timer-heap entry points here
  Request* prev = nullptr;  // FdEntry waiter list
  Request* next = nullptr;
  FdEntry* entry = nullptr;

  // Written by the IO thread before the try_put, read by the green thread
  // after its take (ordered by the mvar's lock).
  int err = 0;

  mvar<int> box;  // the one-shot outcome
  // Two owners: Note [Requests are shared] (plus one while a wake-up is
  // queued: Note [Wake last]).  acq_rel: the last owner must see every
  // write of the others before deleting.
  std::atomic<int> refs{2};

  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

// One fd being polled; owned by the IO thread (Note [fd registrations]).
struct FdEntry {
  uv_poll_t handle;
  int fd = -1;
  int events = 0;  // the mask the handle was last started with; 0: stopped
  bool sticky = false;
  Request* readers = nullptr;
  Request* writers = nullptr;
};

struct TimerEntry {
  std::int64_t deadline;
  std::uint64_t seq;
  Request* req;
  // std::*_heap build a max-heap: "less" means "later".
  bool operator<(const TimerEntry& o) const {
    return deadline != o.deadline ? deadline > o.deadline : seq > o.seq;
  }
};

class IoManager {
 public:
  // ensure_started starts the IO thread on first use in a run.
  void ensure_started() {
    // acquire: pairs with start()'s release, making the loop visible.
    if (!started_.load(std::memory_order_acquire)) [[unlikely]] start();
  }
  bool started() const { return started_.load(std::memory_order_acquire); }

  // push hands a message to the IO thread; any thread.  Note [No lost wake-ups] 1.
  void push(Msg* m) noexcept {
    Msg* h = inbox_.load(std::memory_order_relaxed);
    do {
      m->next = h;
      // release: publishes the request's fields to the IO thread's
      // acquire exchange; relaxed on failure, we retry.
    } while (!inbox_.compare_exchange_weak(h, m, std::memory_order_release,
                                           std::memory_order_relaxed));
    if (h == nullptr) uv_async_send(&async_);
  }

  void shutdown() noexcept;

 private:
  void start();
  void thread_main();
  static void on_async(uv_async_t* a);
  static void on_timer(uv_timer_t* t);
  static void on_poll(uv_poll_t* p, int status, int events);
  static void on_poll_closed(uv_handle_t* h) { delete static_cast<FdEntry*>(h->data); }

  void drain();
  void handle(Msg* m);
  void finish(Request* r, int outcome, bool wake);
  void flush_wakes();
  void finish_and_update(Request* r, int outcome, bool wake) {
    FdEntry* e = r->entry;
    finish(r, outcome, wake);
    if (e) update_poll(e);  // one waiter fewer: maybe a narrower mask
  }
  void add_timer(Request* r);
  void expire_timers();
  void rearm_timer();
  void start_wait(Request* r);
  void update_poll(FdEntry* e);
  void close_entry(FdEntry* e);
  void do_close(Request* r);
  void do_interrupt(Request* r);
  void stop_everything();

  // start/shutdown: life_mu_.  started_: written under life_mu_, read by anyone.
  std::mutex life_mu_;
  std::atomic<bool> started_{false};
  std::thread thread_;  // life_mu_
  // stopping_: set by shutdown() before its uv_async_send; read by the IO thread.
  std::atomic<bool> stopping_{false};

  // Initialised by start() before the IO thread exists (std::thread's
  // constructor orders them before it); then the IO thread's, except that
  // anyone may uv_async_send(&async_).
  uv_loop_t loop_;
  uv_async_t async_;
  uv_timer_t timer_;

  // Lock-free MPSC inbox: any thread pushes, the IO thread takes all.
  std::atomic<Msg*> inbox_{nullptr};

  // The IO thread's only.
  std::vector<TimerEntry> heap_;  // Note [Timer heap]
  std::size_t stale_ = 0;         // done entries still in heap_
  std::uint64_t seq_ = 0;
  std::int64_t armed_for_ = -1;   // deadline timer_ is armed for; -1: stopped
  std::unordered_map<int, FdEntry*> fds_;
  // fds given to io_interrupt_fd and not yet closed: Note [Interrupted fds].
  std::unordered_set<int> interrupted_;
  // Wake-ups queued by finish(), each holding a reference (Note [Wake last]).
  std::vector<std::pair<Request*, int>> wakes_;
};

IoManager io;

void IoManager::start() {
  std::lock_guard<std::mutex> g(life_mu_);
  if (started_.load(std::memory_order_relaxed)) return;
  int rc = uv_loop_init(&loop_);
  if (rc == 0) rc = uv_async_init(&loop_, &async_, &IoManager::on_async);
  if (rc != 0)
    throw std::system_error(-rc, std::generic_category(),
                            "capstan: cannot start the IO manager (libuv loop)");
  uv_timer_init(&loop_, &timer_);
  loop_.data = this;
  stopping_.store(false, std::memory_order_relaxed);
  armed_for_ = -1;
  thread_ = std::thread([this] { thread_main(); });
  started_.store(true, std::memory_order_release);
}

void IoManager::thread_main() {
  pthread_setname_np(pthread_self(), "capstan-io");
  uv_run(&loop_, UV_RUN_DEFAULT);  // returns once stop_everything closed all handles
}

void IoManager::shutdown() noexcept {
  std::lock_guard<std::mutex> g(life_mu_);
  if (!started_.load(std::memory_order_relaxed)) return;
  // seq_cst store, then the send: the callback it causes sees the flag.
  stopping_.store(true, std::memory_order_seq_cst);
  uv_async_send(&async_);
  thread_.join();
  // Messages pushed after the IO thread's last drain can only come from
  // plain OS threads racing the shutdown (a destructor's close): settle
  // them here, so the next run starts with an empty inbox (a non-empty one
  // would never be sent an async wake-up: Note [No lost wake-ups] 1).
  for (Msg* m = inbox_.exchange(nullptr, std::memory_order_acquire); m;) {
    Msg* n = m->next;
    Request* r = m->req;
    if (m->op == Op::close_fd || m->op == Op::close_fd_nowait) ::close(r->fd);
    r->release();  // the IO thread's reference, or the one a cancel carries
    m = n;
  }
  uv_loop_close(&loop_);
  started_.store(false, std::memory_order_release);
}

void IoManager::on_async(uv_async_t* a) {
  auto* self = static_cast<IoManager*>(a->loop->data);
  // The flag first, then the drain: shutdown() sets it only after every
  // green thread has stopped, so a drain after seeing it takes every
  // message they pushed.  (Drain-then-check lost a close pushed between
  // the two.)
  bool stop = self->stopping_.load(std::memory_order_seq_cst);
  self->drain();
  if (stop) self->stop_everything();
  self->flush_wakes();
}

void IoManager::drain() {
  // acquire: pairs with push's release.
  Msg* h = inbox_.exchange(nullptr, std::memory_order_acquire);
  Msg* fifo = nullptr;
  while (h) {  // reverse into arrival order: a submit before its cancel
    Msg* n = h->next;
    h->next = fifo;
    fifo = h;
    h = n;
  }
  while (fifo) {
    Msg* n = fifo->next;  // handle() may free fifo's request
    handle(fifo);
    fifo = n;
  }
  rearm_timer();
}

void IoManager::handle(Msg* m) {
  Request* r = m->req;
  switch (m->op) {
    case Op::sleep:
    case Op::timeout:
      add_timer(r);
      break;
    case Op::wait_fd:
      start_wait(r);
      if (!r->done && r->deadline >= 0) add_timer(r);
      break;
    case Op::close_fd:
    case Op::close_fd_nowait:
      do_close(r);
      break;
    case Op::interrupt_fd:
      do_interrupt(r);
      break;
    case Op::cancel:
      finish_and_update(r, kReady, /*wake=*/false);  // nobody takes any more
      r->release();  // the green thread's reference, carried by the message
      break;
  }
}

// finish completes r once: unlinks it from its fd, queues the wake-up of its
// thread (Note [Wake last]), drops the IO thread's reference unless a heap
// entry still points here.
void IoManager::finish(Request* r, int outcome, bool wake) {
  if (r->done) return;
  r->done = true;
  if (FdEntry* e = r->entry) {
    Request*& head = r->writable ? e->writers : e->readers;
    if (r->prev) r->prev->next = r->next; else head = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = nullptr;
    r->entry = nullptr;
  }
  if (r->in_heap) ++stale_;
  if (wake) {
    // The queued wake-up's own reference.  relaxed: the IO thread already
    // holds one, so this only counts; release() is acq_rel.
    r->refs.fetch_add(1, std::memory_order_relaxed);
    wakes_.emplace_back(r, outcome);
  }
  if (!r->in_heap) r->release();
}

// flush_wakes wakes the threads finish() queued: the last thing each libuv
// callback does (Note [Wake last]).
void IoManager::flush_wakes() {
  for (auto [r, outcome] : wakes_) {
    if (r->kind == Op::timeout) r->on_expire(r->arg, r->token);  // io_add_timeout
    else r->box.try_put(outcome);  // Note [No lost wake-ups] 2
    r->release();             // the wake-up's reference: r may be gone now
  }
  wakes_.clear();
}

// ---------------------------------------------------------------- timers

void IoManager::add_timer(Request* r) {
  r->in_heap = true;
  heap_.push_back({r->deadline, seq_++, r});
  std::push_heap(heap_.begin(), heap_.end());
}

void IoManager::expire_timers() {
  std::int64_t now = now_ns();
  while (!heap_.empty() && heap_.front().deadline <= now) {
    std::pop_heap(heap_.begin(), heap_.end());
    Request* r = heap_.back().req;
    heap_.pop_back();
    r->in_heap = false;
    if (r->done) {
      --stale_;
      r->release();  // finish() left the IO reference to us
    } else {
      finish_and_update(r, r->kind == Op::sleep ? kReady : kTimedOut, true);
    }
  }
}

void IoManager::rearm_timer() {
  for (;;) {
    // Drop done entries from the top, and rebuild when they dominate.
    while (!heap_.empty() && heap_.front().req->done) {
      std::pop_heap(heap_.begin(), heap_.end());
      Request* r = heap_.back().req;
      heap_.pop_back();
      r->in_heap = false;
      --stale_;
      r->release();
    }
    if (stale_ > 1024 && stale_ * 2 > heap_.size()) {
      auto live = std::partition(heap_.begin(), heap_.end(),
                                 [](const TimerEntry& t) { return !t.req->done; });
      for (auto it = live; it != heap_.end(); ++it) {
        it->req->in_heap = false;
        it->req->release();
      }
      heap_.erase(live, heap_.end());
      std::make_heap(heap_.begin(), heap_.end());
      stale_ = 0;
    }
    if (heap_.empty()) {
      if (armed_for_ != -1) uv_timer_stop(&timer_);
      armed_for_ = -1;
      return;
    }
    std::int64_t next = heap_.front().deadline;
    std::int64_t delta = next - now_ns();
    if (delta <= 0) {
      expire_timers();
      continue;
    }
    if (armed_for_ == next) return;
    // Round up to libuv's millisecond; on_timer re-checks (Note [Timer heap]).
    std::uint64_t ms = static_cast<std::uint64_t>((delta + 999'999) / 1'000'000);
    uv_update_time(&loop_);
    uv_timer_start(&timer_, &IoManager::on_timer, ms, 0);
    armed_for_ = next;
    return;
  }
}

void IoManager::on_timer(uv_timer_t* t) {
  auto* self = static_cast<IoManager*>(t->loop->data);
  self->armed_for_ = -1;  // a one-shot timer that fired is stopped
  self->expire_timers();
  self->rearm_timer();
  self->flush_wakes();
}

// ---------------------------------------------------------------- fds

void IoManager::start_wait(Request* r) {
  if (!interrupted_.empty() && interrupted_.count(r->fd)) {  // Note [Interrupted fds]
    finish(r, kInterrupted, true);
    return;
  }
  FdEntry*& slot = fds_[r->fd];
  if (!slot) {
    auto* e = new FdEntry;
    int rc = uv_poll_init(&loop_, &e->handle, r->fd);
    if (rc != 0) {
      delete e;
      fds_.erase(r->fd);
      if (rc == UV_EPERM) {  // a regular file: epoll refuses it, it never blocks
        finish(r, kReady, true);
      } else {
        r->err = rc;
        finish(r, kFailed, true);
      }
      return;
    }
    e->fd = r->fd;
    e->handle.data = e;
    slot = e;
  }
  FdEntry* e = slot;
  e->sticky = e->sticky || r->sticky;
  Request*& head = r->writable ? e->writers : e->readers;
  r->prev = nullptr;
  r->next = head;
  if (head) head->prev = r;
  head = r;
  r->entry = e;
  update_poll(e);
}

// update_poll sets e's mask to what its waiters want; with none, stops the
// handle (sticky) or closes it.
void IoManager::update_poll(FdEntry* e) {
  int want = (e->readers ? UV_READABLE : 0) | (e->writers ? UV_WRITABLE : 0);
  if (want == 0) {
    if (e->sticky) {
      if (e->events) uv_poll_stop(&e->handle);
      e->events = 0;
    } else {
      close_entry(e);
    }
    return;
  }
  if (want == e->events) return;
  int rc = uv_poll_start(&e->handle, want, &IoManager::on_poll);
  if (rc != 0) {
    for (Request** list : {&e->readers, &e->writers}) {
      while (Request* r = *list) {
        r->err = rc;
        finish(r, kFailed, true);
      }
    }
    close_entry(e);
    return;
  }
  e->events = want;
}

// close_entry forgets e and closes its handle (freed in the close callback).
void IoManager::close_entry(FdEntry* e) {
  fds_.erase(e->fd);
  uv_close(reinterpret_cast<uv_handle_t*>(&e->handle), &IoManager::on_poll_closed);
}

void IoManager::on_poll(uv_poll_t* p, int status, int events) {
  auto* self = static_cast<IoManager*>(p->loop->data);
  auto* e = static_cast<FdEntry*>(p->data);
  // An error (status < 0) wakes everyone: their read/write reports it.
  bool rd = status < 0 || (events & (UV_READABLE | UV_DISCONNECT)) != 0;
  bool wr = status < 0 || (events & UV_WRITABLE) != 0;
  if (rd)
    while (Request* r = e->readers) self->finish(r, kReady, true);
  if (wr)
    while (Request* r = e->writers) self->finish(r, kReady, true);
  self->update_poll(e);  // before the wake-ups: Note [Wake last]
  self->flush_wakes();
}

void IoManager::do_close(Request* r) {
  auto it = fds_.find(r->fd);
  if (it != fds_.end()) {  // wake, stop, close: Note [fd registrations]
    FdEntry* e = it->second;
    for (Request** list : {&e->readers, &e->writers})
      while (Request* w = *list) finish(w, kClosed, true);
    if (e->events) uv_poll_stop(&e->handle);
    e->events = 0;
    close_entry(e);
  }
  interrupted_.erase(r->fd);  // the number may be reused from here on
  int rc = ::close(r->fd);
  r->err = rc == 0 ? 0 : errno;
  finish(r, kReady, r->kind == Op::close_fd);
}

// Note [Interrupted fds]
// ~~~~~~~~~~~~~~~~~~~~~~
// capstan::net closes a socket that other green threads are using in two
// steps (Note [Closing under a blocked call] in lib/net.cpp): the fd stays
// open while any call uses it, and the closer sends io_interrupt_fd, which
// wakes every waiter on it with kInterrupted and fails every later wait on
// it the same way, until the fd is closed through do_close (which the last
// call sends).  As the fd is open until then, its number cannot be reused
// by another file meanwhile, so the set never refers to the wrong file.  A
// wait and the interrupt can arrive in either order: before, the interrupt
// finds the waiter; after, the waiter finds the number in the set.
void IoManager::do_interrupt(Request* r) {
  interrupted_.insert(r->fd);
  auto it = fds_.find(r->fd);
  if (it != fds_.end()) {
    FdEntry* e = it->second;
    for (Request** list : {&e->readers, &e->writers})
      while (Request* w = *list) finish(w, kInterrupted, true);
    update_poll(e);  // no waiters: stopped (sticky) or closed
  }
  finish(r, kReady, false);
}

// stop_everything ends the loop: every handle is closed, every request
// dropped without a wake-up (their threads are gone: run_main calls
// shutdown() after the schedulers stopped).
void IoManager::stop_everything() {
  std::vector<FdEntry*> entries;
  for (auto& [fd, e] : fds_) entries.push_back(e);
  for (FdEntry* e : entries) {
    for (Request** list : {&e->readers, &e->writers})
      while (Request* w = *list) finish(w, kClosed, false);
    if (fds_.count(e->fd)) close_entry(e);  // sticky ones are still here
  }
  for (TimerEntry& t : heap_) {
    t.req->in_heap = false;
    if (t.req->done) t.req->release(); else finish(t.req, kReady, false);
  }
  heap_.clear();
  stale_ = 0;
  interrupted_.clear();
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
}

std::int64_t deadline_after(long long ns) {
  std::int64_t now = now_ns();
  if (ns > std::numeric_limits<std::int64_t>::max() - now) return std::numeric_limits<std::int64_t>::max();
  return now + ns;
}

// await parks on r's mvar and returns the outcome.  The caller keeps its
// reference (and drops it after reading r->err); on unwinding
// (thread_killed at shutdown) the reference goes to the IO thread with the
// cancel message instead.
int await(Request* r) {
  try {
    return r->box.take();
  } catch (...) {
    io.push(&r->cancel);  // Note [No lost wake-ups] 3
    throw;
  }
}

Request* new_request(Op kind) {
  auto* r = new Request;
  r->kind = kind;
  r->submit.req = r;
  r->submit.op = kind;
  r->cancel.req = r;
  r->cancel.op = Op::cancel;
  return r;
}

}  // namespace

void io_add_timeout(long long ns, void (*on_expire)(void*, std::uint64_t) noexcept, void* arg,
                    std::uint64_t token) {
  io.ensure_started();
  Request* r = new_request(Op::timeout);
  r->refs.store(1, std::memory_order_relaxed);  // the IO thread's only
  r->deadline = deadline_after(ns);
  r->on_expire = on_expire;
  r->arg = arg;
  r->token = token;
  io.push(&r->submit);
}

void io_sleep(long long ns) {
  require_green_thread("capstan::sleep_for");
  io.ensure_started();
  Request* r = new_request(Op::sleep);
  r->deadline = deadline_after(ns);
  io.push(&r->submit);
  await(r);
  r->release();
}

bool io_wait_fd(int fd, bool writable, long long timeout_ns, const char* what, bool sticky) {
  require_green_thread(what);
  if (fd < 0)
    throw usage_error(fmt::format("{}: fd {} is not a file descriptor", what, fd));
  if (timeout_ns == 0) {  // a check, not a wait
    struct pollfd p {fd, static_cast<short>(writable ? POLLOUT : POLLIN), 0};
    int n = ::poll(&p, 1, 0);
    detail::safe_point();
    return n != 0;  // ready, or an error the caller's IO will report
  }
  io.ensure_started();
  Request* r = new_request(Op::wait_fd);
  r->fd = fd;
  r->writable = writable;
  r->sticky = sticky;
  r->deadline = timeout_ns < 0 ? -1 : deadline_after(timeout_ns);
  io.push(&r->submit);
  int outcome = await(r);
  int err = r->err;
  r->release();
  switch (outcome) {
    case kReady: return true;
    case kTimedOut: return false;
    case kClosed:
      throw io_error(fmt::format(
          "{}: fd {} was closed by close_fd while this thread waited on it", what, fd));
    case kInterrupted:
      throw io_error(fmt::format("{}: fd {} was closed while this thread waited on it", what, fd));
    default:
      throw io_error(fmt::format("{}: cannot poll fd {}: {}", what, fd, uv_strerror(err)));
  }
}

void io_close_fd(int fd) {
  require_green_thread("capstan::close_fd");
  if (fd < 0)
    throw usage_error(fmt::format("capstan::close_fd: fd {} is not a file descriptor", fd));
  io.ensure_started();
  Request* r = new_request(Op::close_fd);
  r->fd = fd;
  io.push(&r->submit);
  await(r);
  int err = r->err;
  r->release();
  if (err != 0)
    throw std::system_error(err, std::generic_category(),
                            fmt::format("capstan::close_fd: close(fd {})", fd));
}

void io_close_fd_nowait(int fd) noexcept {
  if (fd < 0) return;
  if (!io.started()) {
    ::close(fd);
    return;
  }
  Request* r = new_request(Op::close_fd_nowait);
  r->fd = fd;
  r->refs.store(1, std::memory_order_relaxed);  // nobody waits: the IO thread's only
  io.push(&r->submit);
}

void io_interrupt_fd(int fd) noexcept {
  // Nothing can wait on fd unless the IO manager runs: the waiter starts it
  // (io_start) before it counts itself as a user of the fd, so a closer
  // that saw the count sees started() (lib/net.cpp).
  if (fd < 0 || !io.started()) return;
  Request* r = new_request(Op::interrupt_fd);
  r->fd = fd;
  r->refs.store(1, std::memory_order_relaxed);  // nobody waits: the IO thread's only
  io.push(&r->submit);
}

void io_start() { io.ensure_started(); }

void io_shutdown() noexcept { io.shutdown(); }

}  // namespace capstan::rts
