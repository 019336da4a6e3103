// timers.cpp - the IO manager's timer heap: every sleep, fd-wait time-out
// and mvar time-out of the run under one libuv timer, on the IO thread.
//
// Note [Timer heap]
// ~~~~~~~~~~~~~~~~~
// All deadlines (sleeps, fd-wait time-outs, mvar time-outs and timeout()
// frames) sit in one binary min-heap on the IO thread, ordered by
// (deadline, arrival), with a single uv_timer_t armed for the earliest.
// The heap is intrusive: each Request knows its slot (heap_index), so a
// request that ends otherwise (readiness, close_fd, a cancel) leaves the
// heap at once, in O(log n), when finish() completes it; the heap holds
// exactly the live timers, and its array is shrunk when it falls to a
// quarter of its capacity.  So memory follows live timers, not timers
// started per deadline (Note [Cancelling a timer]).  libuv's timers have
// millisecond resolution and fire when its cached millisecond clock reaches
// the due time, which can be up to a millisecond before our nanosecond
// deadline, so the callback compares deadlines with the monotonic clock
// and re-arms for what is not yet due: a sleep never ends early.  Expired
// requests are all woken in one callback (one batch per loop iteration).
// Rejected: one uv_timer_t per sleeping thread, which needs uv_timer_init,
// a start and an asynchronous uv_close (its memory lives until the close
// callback) - three operations instead of one heap push.  Rejected too:
// leaving finished requests in the heap, marked done, until they reach
// the top (the first design): a server wrapping each request in a 30 s
// timeout at 100 k requests/s held 3 M dead entries, and their requests.
//
// Note [Cancelling a timer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// io_add_timeout returns a TimerRef: the request's second reference (the
// IO thread holds the first, Note [Requests are shared]).  Its holder must
// give it back exactly once:
//  * io_cancel_timeout pushes the request's own cancel message, which
//    carries the reference.  The IO thread handles it like any cancel:
//    finish() takes the request out of the heap and drops it, unless it
//    is already done (it fired), when the message only drops the reference.
//  * io_forget_timeout drops the reference without a message, for a holder
//    that knows the timer fired (its on_expire ran or is running; the IO
//    thread's wake-up holds a reference of its own until on_expire returns).
// Exactly one of (fired, cancelled) happens, because both are decided on
// the IO thread, one message or one expiry at a time, by finish(), which
// completes a request once (Request::done): an expiry finishes it and
// queues on_expire; a cancel handled first finishes it without one.
// What the IO thread cannot decide is whether the holder still wants the
// expiry when it runs: a cancel pushed after the deadline passed but
// before the IO thread expired the timer arrives too late.  So every
// on_expire still checks, under the waiting thread's wait_lock, that what
// it would end is still the wait it was armed for: a timed take compares
// timed_seq with its token (Note [Timed takes] in rts/mvar/mvar_core.cpp),
// a timeout() frame looks for its token among the thread's armed frames
// (Note [Timeouts] in timeouts.cpp).  Tokens come from a per-thread counter
// and are never reused, and both records are cleared under wait_lock when
// the wait ends, so an expiry that lost the race finds a different token
// (or none) and does nothing: it can never wake a later wait of the thread.
// Cost: a cancel is a queue push plus, when the queue was empty, one
// uv_async_send (an eventfd write), paid only by a wait that parked.  A
// timeout() whose function does not block registers nothing at all (Note
// [Timeouts]), which is what keeps that case at a few nanoseconds.
// Backpressure: the IO thread handles each timer twice (its submit and
// its cancel) and, on two cores shared with the capabilities, can fall far
// behind a thread that starts and cancels timers every 200 ns; the queue
// then holds the memory the heap no longer does (200 MB after 5 M rounds
// in timers_test before this was added).  So io_add_timeout waits,
// yielding its OS thread, while more than kMaxQueued (16 k) messages are
// in flight (queued_, Note [Messages in flight] in wake_ups.cpp): a few
// MB of requests wait at most.  The wait is bounded (kMaxThrottleNs, 2 ms)
// because the starter may hold an mvar's lock (park_timed and
// arm_timeouts register under it) that an expiry on the IO thread is
// spinning to get (Note [Timed takes]): an unbounded wait would be a
// deadlock; a bounded one lets the expiry through after it.  Only starting
// a timer waits: a cancel is noexcept and may run while unwinding, and
// each start is followed by at most one cancel.
// Rejected alternatives:
//  * Marking cancelled entries and letting them drain from the top (or
//    rebuilding when they dominate): memory grows with the timers started
//    per deadline, the thing to avoid; and deadlock detection saw a
//    satisfied take_for's timer as pending until its deadline.
//  * Cancels that skip the uv_async_send and wait for the IO thread's next
//    wake-up: the submit queue's wake-up protocol (Note [No lost wake-ups]
//    1) lets only the pusher that finds the queue empty send, so a silent
//    push would strand later submits; a second queue would do, but its
//    memory is bounded only by how often the IO thread wakes (never, for
//    60 s timers and nothing else to do).
//  * A timer wheel or per-capability heaps for long timers: cheaper
//    registration, but every capability's idle path would have to sleep
//    until its own earliest deadline; the single IO thread already does.
//    The next step if registration, not the park, dominates a timed wait.
#include <algorithm>
#include <cstdint>
#include <thread>

#include "primitives/clock.hpp"
#include "io/io_thread.hpp"

namespace capstan::rts::iomgr {

namespace {

// earlier: the heap order, (deadline, arrival).
bool earlier(const Request* a, const Request* b) {
  return a->deadline != b->deadline ? a->deadline < b->deadline : a->seq < b->seq;
}

}  // namespace

void IoManager::sift_up(std::size_t i) {
  Request* r = heap_[i];
  while (i > 0) {
    std::size_t parent = (i - 1) / 2;
    if (!earlier(r, heap_[parent])) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, r);
}

void IoManager::sift_down(std::size_t i) {
  Request* r = heap_[i];
  std::size_t n = heap_.size();
  for (;;) {
    std::size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && earlier(heap_[c + 1], heap_[c])) ++c;
    if (!earlier(heap_[c], r)) break;
    place(i, heap_[c]);
    i = c;
  }
  place(i, r);
}

void IoManager::throttle_slow() noexcept {
  std::int64_t give_up = now_ns() + kMaxThrottleNs;  // Note [Cancelling a timer]
  while (queued_.load(std::memory_order_relaxed) > kMaxQueued && now_ns() < give_up)
    std::this_thread::yield();
}

void IoManager::add_timer(Request* r) {
  r->seq = seq_++;
  heap_.push_back(r);
  sift_up(heap_.size() - 1);
  timers_.store(heap_.size(), std::memory_order_relaxed);  // a count for tests
}

// remove_timer takes r out of the heap: the last entry fills its slot and
// moves up or down from there.
void IoManager::remove_timer(Request* r) {
  std::size_t i = r->heap_index;
  r->heap_index = kNotInHeap;
  Request* last = heap_.back();
  heap_.pop_back();
  if (last != r) {
    place(i, last);
    if (i > 0 && earlier(last, heap_[(i - 1) / 2])) sift_up(i); else sift_down(i);
  }
  // Give memory back once the heap has shrunk to a quarter (Note [Timer heap]).
  if (heap_.capacity() > 4096 && heap_.size() < heap_.capacity() / 4) heap_.shrink_to_fit();
  timers_.store(heap_.size(), std::memory_order_relaxed);
}

void IoManager::expire_timers() {
  std::int64_t now = now_ns();
  while (!heap_.empty() && heap_.front()->deadline <= now) {
    Request* r = heap_.front();  // live: finish() takes done requests out
    finish_and_update(r, r->kind == Op::sleep ? kReady : kTimedOut, true);
  }
}

void IoManager::rearm_timer() {
  for (;;) {
    if (heap_.empty()) {
      if (armed_for_ != -1) uv_timer_stop(&timer_);
      armed_for_ = -1;
      return;
    }
    std::int64_t next = heap_.front()->deadline;
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

// drop_timers empties the heap at shutdown, finishing what is left without
// a wake-up.
void IoManager::drop_timers() {
  while (!heap_.empty()) finish(heap_.back(), kReady, false);  // the back: no sifting
}

}  // namespace capstan::rts::iomgr
