// wake_ups.cpp - the end of a request on the IO thread: finish() completes
// it, flush_wakes() wakes its thread last, and both keep the counts the
// deadlock detector reads (io_parked, io_queued) true throughout.
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
//
// Note [Messages in flight]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Deadlock detection (rts/exception/deadlock.cpp) must not mistake a
// thread whose sleep or timed wait is still on its way to the IO thread
// for a thread nothing can wake.  parked_ counts only what the IO thread
// has handled, and the IO thread may lag far behind a thread that starts
// and cancels timers quickly (millions of messages, longer than the
// detector's two ticks).  So push() counts every message in queued_
// before pushing it, and drain() subtracts the messages it took only after
// handling them, so after count_parked().  A reader that loads queued_ and
// then parked_ (all seq_cst) and finds both zero has seen every request
// that was pushed: if queued_ was already decremented for it, its
// parked_ increment came before, and only finish() or flush_wakes undoes
// that (Note [Wake-ups in flight]; or, for a close_fd of a lingering
// socket, closes_done() after the waiter's wake-up: Note [Closing a
// lingering socket] in io/closer.hpp).
//
// Note [Wake-ups in flight]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The other end of a request's life has the same hazard.  finish() takes
// an expired or ready request off the heap and its fd, but its thread is
// woken only by flush_wakes, at the end of the callback (Note [Wake last]):
// the try_put of its box, or a timeout's on_expire, pushes it to an inbox.
// Between the two the thread is blocked, every capability may be idle, and
// nothing in the heap would wake it.  If finish() let go of the parked_
// count there, a detector tick could see a quiet run, and when the IO
// thread was preempted in that gap for two ticks (a loaded machine; the
// ThreadSanitizer build), it raised blocked_indefinitely in a thread whose
// timer had fired: main waiting in timeout(10ms, acquire) on a semaphore
// nobody would release.  So a request that has a wake-up stays counted
// until flush_wakes has delivered it; the count drops after the push to
// the inbox (seq_cst), where quiet_now sees the thread instead.  A request
// that ends while drain() handles it (every close_fd, a wait on a regular
// file or an interrupted fd, a registration that failed) was never
// counted: finish() counts it then, before drain's seq_cst decrement of
// queued_, so the detector sees it in one count or the other throughout.
// A request finished without a wake-up (a cancel: its thread is running)
// drops its count in finish().  Tested by
// Deadlock.NotWhileTheIoThreadIsLateWithAWakeUp (every kind of wait, the
// IO thread made late by a fault-injection knob) and DeadlockStress.*
// (tests/stress/deadlock_stress.cpp), which failed about one run in
// fifteen before.
#include "io/io_thread.hpp"

#include <chrono>
#include <thread>

#include "primitives/fault_injection.hpp"
#include "runtime/runtime.hpp"
#include "schedule/idle.hpp"

namespace capstan::rts::iomgr {

// count_parked counts r in parked_ until finish() (r is still ours: any
// wake-up is queued, not yet flushed).  relaxed: the IO thread's own
// increment, ordered for the deadlock detector by drain()'s seq_cst
// decrement of queued_ after it (Note [Messages in flight]).  The IO thread
// and the closing threads write parked_ (Note [Closing a lingering socket]
// in io/closer.hpp).
void IoManager::count_parked(Request* r) {
  if (r->done) return;
  r->counted = true;
  parked_.fetch_add(1, std::memory_order_relaxed);
}

// finish completes r once: unlinks it from its fd and from the timer heap,
// queues the wake-up of its thread (Note [Wake last]), drops the IO
// thread's reference.
void IoManager::finish(Request* r, int outcome, bool wake) {
  if (r->done) return;
  r->done = true;
  // A request with a wake-up is counted until flush_wakes has handed its
  // thread back, even one that ends as drain() handles it (a close, a
  // wait on a regular file): Note [Wake-ups in flight].
  if (wake) {
    if (!r->counted) {
      r->counted = true;
      parked_.fetch_add(1, std::memory_order_relaxed);  // as count_parked
    }
  } else if (r->counted) {
    r->counted = false;
    parked_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (FdEntry* e = r->entry) {
    Request*& head = r->writable ? e->writers : e->readers;
    if (r->prev) r->prev->next = r->next; else head = r->next;
    if (r->next) r->next->prev = r->prev;
    r->prev = r->next = nullptr;
    r->entry = nullptr;
  }
  if (r->heap_index != kNotInHeap) remove_timer(r);  // Note [Timer heap]
  if (wake) {
    // The queued wake-up's own reference.  relaxed: the IO thread already
    // holds one, so this only counts; release() is acq_rel.
    r->refs.fetch_add(1, std::memory_order_relaxed);
    wakes_.emplace_back(r, outcome);
  }
  r->release();  // the IO thread's reference
}

// flush_wakes wakes the threads finish() queued: the last thing each libuv
// callback does (Note [Wake last]).
void IoManager::flush_wakes() {
  if (wakes_.empty()) return;
  if (int us = fault_injection::io_wake_delay_us.load(std::memory_order_relaxed)) [[unlikely]]
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  for (auto [r, outcome] : wakes_) {
    if (r->kind == Op::timeout) r->on_expire(r->arg, r->token);  // io_add_timeout
    else r->box.try_put(outcome);  // Note [No lost wake-ups] 2
    if (r->counted) {
      // Only now: Note [Wake-ups in flight].  seq_cst: after the wake-up's
      // push to an inbox, as the detector reads them.
      r->counted = false;
      parked_.fetch_sub(1, std::memory_order_seq_cst);
    }
    r->release();             // the wake-up's reference: r may be gone now
  }
  wakes_.clear();
  // A wake-up that woke nobody (a time-out queued for a thread blocked
  // uninterruptibly, a timer that outlived its wait) made no capability
  // leave idle(), yet ended what a parked ticker judged pending: Note
  // [Stopping the ticker] in runtime/ticker.cpp.  Only while every
  // capability is idle: the ticker parks only on a look that found them
  // all idle (e0) and no exit since; if this load (after the decrements
  // above, all seq_cst) finds one busy, either that look came after it and
  // read the decremented count, or one has left idle() since the look and
  // its exit ends the park.  A busy run pays a load, not an RMW.
  if (Runtime::idle_count(rt.idle_word.load(std::memory_order_seq_cst)) == rt.n_caps)
    ticker_judgement_changed();
}

}  // namespace capstan::rts::iomgr
