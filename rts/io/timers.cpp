// timers.cpp - the IO manager's timer heap: every sleep, fd-wait time-out
// and mvar time-out of the run under one libuv timer, on the IO thread.
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
// Rejected: one uv_timer_t per sleeping thread, which needs uv_timer_init,
// a start and an asynchronous uv_close (its memory lives until the close
// callback) - three operations instead of one heap push.
#include <algorithm>
#include <cstdint>

#include "primitives/clock.hpp"
#include "io/io_thread.hpp"

namespace capstan::rts::iomgr {

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

// drop_timers empties the heap at shutdown, finishing what is left without
// a wake-up.
void IoManager::drop_timers() {
  for (TimerEntry& t : heap_) {
    t.req->in_heap = false;
    if (t.req->done) t.req->release(); else finish(t.req, kReady, false);
  }
  heap_.clear();
  stale_ = 0;
}

}  // namespace capstan::rts::iomgr
