// mvar_core.cpp - the runtime half of mvar<T>: parking and serving waiters.
// See Note [Blocking on an MVar] and Note [Killing a blocked thread] in
// scheduler.cpp.
#include "capstan/detail/mvar_core.hpp"

#include <exception>

#include "capstan/errors.hpp"
#include "capstan/mvar.hpp"
#include "runtime.hpp"
#include "scheduler.hpp"

namespace capstan::detail {

using rts::Thread;

void mvar_core::lock_slow() noexcept {
  for (int spins = 0;; ++spins) {
    if (!locked_.load(std::memory_order_relaxed) && try_lock()) return;
    if (spins < 128) rts::cpu_relax(); else sched_yield();
  }
}

void mvar_core::park(waiter& w) {
  rts::Task* task = rts::my_task_before_switch();  // used only before the switch
  if (!task || !task->cap || !task->cap->current) [[unlikely]] {
    remove(w);
    unlock();
    if (task) rts::require_green_thread("capstan::mvar take/put/read");  // inside safe_call
    throw usage_error(
        "capstan::mvar: take/put/read would block on an OS thread that is not running a green "
        "thread; block only inside capstan::run, or use try_take/try_put from other threads");
  }
  Thread* cur = task->cap->current;
  if (rts::rt.shutting_down.load(std::memory_order_relaxed) && !cur->is_main &&
      std::uncaught_exceptions() == 0) [[unlikely]] {
    remove(w);
    unlock();
    rts::check_killed(cur);  // Note [Shutdown checkpoints]: does not return
  }
  w.thread = cur;
  if (rts::rt.waits_need_lock.load(std::memory_order_relaxed)) [[unlikely]] {
    cur->wait_lock.lock();  // Note [Killing a blocked thread]
    cur->blocked_on = this;
    cur->waiter = &w;
    cur->wait_lock.unlock();
  } else {
    cur->blocked_on = this;
    cur->waiter = &w;
  }
  rts::park_current(task, cur, &locked_);  // releases our lock once we are off the CPU
  switch (w.outcome) {
    case waiter::served: return;
    case waiter::killed: throw thread_killed{};
    case waiter::orphaned: throw blocked_indefinitely{};
  }
}

void* mvar_core::serve(waiter& w) noexcept {
  remove(w);
  auto* t = static_cast<Thread*>(w.thread);
  if (rts::rt.waits_need_lock.load(std::memory_order_relaxed) ||
      !rts::my_task_before_switch() || !rts::my_task_before_switch()->cap) [[unlikely]] {
    // (An OS thread holding no capability - a plain thread, or one inside
    // safe_call - is not covered by the killer's quiescence check.)
    t->wait_lock.lock();  // Note [Killing a blocked thread]
    t->blocked_on = nullptr;
    t->waiter = nullptr;
    t->wait_lock.unlock();
  } else {
    t->blocked_on = nullptr;
    t->waiter = nullptr;
  }
  w.outcome = waiter::served;  // last touch of w
  return t;
}

void wake_list::more(void* thread) noexcept {
  auto* t = static_cast<Thread*>(thread);
  t->link = nullptr;  // t is dequeued and not yet runnable: link is free
  if (chain_tail_) static_cast<Thread*>(chain_tail_)->link = t; else chain_ = t;
  chain_tail_ = t;  // served order is kept: FIFO into the run queue
}

void wake_list::wake_rest() noexcept {
  rts::wake(static_cast<Thread*>(first_));
  for (auto* t = static_cast<Thread*>(chain_); t;) {
    Thread* next = t->link;
    rts::wake(t);
    t = next;
  }
}

mvar_core::~mvar_core() {
  // Always take the lock, even with no waiters: a shutdown killer or a
  // blocker's post-switch unlock may still be inside.
  lock();
  wake_list woken;
  while (waiter* w = head_) {
    woken.add(serve(*w));
    w->outcome = waiter::orphaned;  // serve() left w's thread not yet runnable
  }
  unlock();
  woken.wake_all();
}

}  // namespace capstan::detail
