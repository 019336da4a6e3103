// timeouts.cpp - timeout(): a deadline kept in the caller's frame, turned
// into an asynchronous exception when it passes.
//
// Note [Timeouts]
// ~~~~~~~~~~~~~~~
// GHC's timeout forks a thread that sleeps and then throws; that is a fork,
// a timer and a kill per call (~900 ns).  Most timeouts end long before
// their deadline, around work that finishes at once, so capstan keeps a
// timeout lazy until something could make it late:
//  * timeout_push links a timeout_frame (on the caller's stack) into the
//    thread's list of frames: a clock read and a few stores, no lock, no
//    timer.  timeout_pop unlinks it.  Nothing else happens for a timeout
//    whose function returns without blocking.
//  * A thread that blocks (mvar_core::park, so also sleeps and fd waits)
//    or enters a safe call first arms its unarmed frames: one IO-manager
//    timer each (arm_timeouts), whose expiry posts the frame's
//    timeout_expired (post_throw: it interrupts the wait, or queues).
//  * A thread that computes without blocking is checked by the scheduler
//    at each timeslice boundary (expire_due_timeouts, schedule/raise.cpp):
//    a frame past its deadline posts its exception to its own thread.  So
//    a timeout around pure computation fires at the first tick after its
//    deadline, as GHC's does (its timeout thread runs at a context switch).
// The expiry (on the IO thread) and the pop (on the owner) meet under the
// owner's wait_lock: an armed frame is on Thread::armed; the expiry
// unlinks it and marks it fired and `firing` while it posts; the pop waits
// out `firing`, unlinks a frame still armed and cancels its timer (one
// whose expiry is already under way then finds nothing: tokens are never
// reused; Note [Cancelling a timer] in timers.cpp), and takes back a
// message not yet raised.  So a time-out either raises exactly once inside
// the function or not at all, never after timeout() has returned, and an
// armed frame's timer leaves the IO thread's heap when the frame ends.
//
// Note [Timeouts begun while unwinding]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// No asynchronous exception is raised in a thread while an exception is
// in flight in it: one raised in a destructor that unwinding runs would
// leave that destructor, and C++ calls std::terminate.  A timeout begun
// inside such a destructor (a flush on the error path) is the exception
// to the rule: its function runs inside the destructor, and so does its
// catch, so its timeout_expired never leaves it.  timeout_push records
// how many exceptions are in flight (throw_msg::in_flight), and the
// time-out is raised only while exactly that many are (interruptible_wait
// and pop_raisable, schedule/raise.cpp): more, and its function is itself
// unwinding inside a destructor of its own, where the time-out waits
// until that ends, as any other.  (It used to wait for its function,
// however long: a timeout there never timed out.)
#include "io/timeouts.hpp"

#include <exception>
#include <limits>

#include "capstan/detail/async_core.hpp"
#include "capstan/errors.hpp"
#include "io/io_manager.hpp"
#include "primitives/clock.hpp"
#include "primitives/spin.hpp"
#include "runtime/runtime.hpp"
#include "schedule/raise.hpp"
#include "task/green_thread.hpp"

namespace capstan::rts {

void link_armed(Thread* t, TimeoutFrame* f) {
  f->armed_prev = nullptr;
  f->armed_next = t->armed;
  if (t->armed) t->armed->armed_prev = f;
  t->armed = f;
}

void unlink_armed(Thread* t, TimeoutFrame* f) {
  if (f->armed_prev) f->armed_prev->armed_next = f->armed_next; else t->armed = f->armed_next;
  if (f->armed_next) f->armed_next->armed_prev = f->armed_prev;
  f->armed_next = f->armed_prev = nullptr;
}

namespace {

// expire runs on the IO thread when an armed frame's deadline passes.
void expire(void* arg, std::uint64_t token) noexcept {
  auto* t = static_cast<Thread*>(arg);
  t->wait_lock.lock();
  TimeoutFrame* f = t->armed;
  while (f && f->token != token) f = f->armed_next;
  if (!f) {
    t->wait_lock.unlock();
    return;  // popped already: the timer outlived its timeout
  }
  unlink_armed(t, f);
  f->fired = true;
  f->firing = true;  // the owner's pop waits for us from here on
  t->wait_lock.unlock();
  f->msg.ex = std::make_exception_ptr(timeout_expired{f->thread, f->token});
  post_throw(t, f->thread, &f->msg);
  t->wait_lock.lock();
  f->firing = false;  // last touch of the frame
  t->wait_lock.unlock();
}

}  // namespace

void arm_timeouts(Thread* cur) {
  std::int64_t now = now_ns();
  for (TimeoutFrame* f = cur->timeouts; f && cur->unarmed_timeouts != 0; f = f->outer) {
    if (f->armed || f->fired) continue;
    f->armed = true;
    --cur->unarmed_timeouts;
    cur->wait_lock.lock();
    link_armed(cur, f);
    cur->wait_lock.unlock();
    std::int64_t left = f->deadline_ns - now;
    try {
      f->timer = io_add_timeout(left > 0 ? left : 1, &expire, cur, f->token).req;
    } catch (...) {  // no IO manager, or no memory: the frame stays unarmed
      cur->wait_lock.lock();
      unlink_armed(cur, f);
      cur->wait_lock.unlock();
      f->armed = false;
      ++cur->unarmed_timeouts;
      throw;
    }
  }
}

}  // namespace capstan::rts

namespace capstan::detail {

using rts::Thread;

void timeout_push(timeout_frame& f, long long ns) {
  rts::Task* task = rts::require_green_thread("capstan::timeout");
  Thread* cur = task->cap->current;
  f.msg.in_flight = task->eh->uncaught;  // Note [Timeouts begun while unwinding]
  // Expiry reads frames under wait_lock: Note [Wait locks].  Once per run.
  if (!rts::rt.wait_locks_on.load(std::memory_order_acquire)) [[unlikely]] rts::enable_wait_locks();
  std::int64_t now = rts::now_ns();
  f.deadline_ns = ns > std::numeric_limits<std::int64_t>::max() - now
                      ? std::numeric_limits<std::int64_t>::max()
                      : now + ns;
  f.thread = cur->id;
  f.token = ++cur->timed_next;
  f.outer = cur->timeouts;
  cur->timeouts = &f;
  ++cur->unarmed_timeouts;
}

void timeout_pop(timeout_frame& f) noexcept {
  Thread* cur = rts::my_task()->cap->current;
  cur->timeouts = f.outer;
  if (!f.armed) {
    if (!f.fired) {
      --cur->unarmed_timeouts;
      return;  // the common case: nothing was ever registered or posted
    }
  }
  if (!f.armed) --cur->unarmed_timeouts;  // fired by its own thread at a tick
  for (rts::SpinWait spin;; spin.turn()) {
    cur->wait_lock.lock();
    if (f.firing) {
      cur->wait_lock.unlock();
      continue;  // the expiry is posting: a few instructions
    }
    if (f.armed && !f.fired) rts::unlink_armed(cur, &f);
    cur->wait_lock.unlock();
    break;
  }
  // Armed frames only fire from their timer (expire_due_timeouts skips
  // them): fired means the expiry ran; otherwise the timer may still be
  // pending and goes (Note [Cancelling a timer] in io/timers.cpp).
  if (f.armed) {
    if (f.fired) rts::io_forget_timeout(rts::TimerRef{f.timer});
    else rts::io_cancel_timeout(rts::TimerRef{f.timer});
  }
  if (f.fired) rts::retract_throw(cur, &f.msg);  // a time-out that came too late
}

}  // namespace capstan::detail
