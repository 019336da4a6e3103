// block.cpp - waking: a waker makes a blocked thread runnable again; and
// a thread moving itself to another capability.
#include "schedule/schedule.hpp"
#include "schedule/pick.hpp"
#include "schedule/switch.hpp"
#include "task/handover.hpp"

namespace capstan::rts {

// Blocking itself is park_current, in schedule/park.hpp (Note [Blocking
// on an MVar]), inlined into the waits that call it.

// Note [Migrating to a spark's capability]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A spark pool is touched only by its capability's owner (Note [Spark
// pools]).  A thread that made a spark and then moved (woken elsewhere, or
// pushed) goes back to the spark's capability before it forces or discards
// the spark: it queues itself on that capability's inbox - after its
// context is saved, by the landing side, as with every hand-over - and
// continues there as its owner.
void migrate_current_to(Capability* target) {
  Task* task = my_task();
  Capability* cap = task->cap;
  Thread* cur = cap->current;
  cur->cap = target;
  cur->state = ThreadState::runnable;
  Thread* next = pick(cap);
  task->post.send_migrant(cur, target, false);
  switch_to(task, cap, cur, next, false, SwitchWhy::migrated);
}

// Note [Wake-up affinity]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A thread woken by a running green thread joins the *waker's* capability
// (unless it is locked there by fork_on or bound), as Go's runnext does: the
// woken thread usually consumes what the waker just produced, so its data
// is in this core's cache, and a ping-pong or a ring stays on one
// capability instead of paying a cross-core wake-up per hand-off.  Load is
// spread by Note [Pushing work] instead.  Wake-ups from an OS thread that
// runs no green thread, or of locked threads, go to the thread's own
// capability through its inbox.
// Note [Waking from outside]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A plain OS thread (a try_put from a std::thread) wakes through the
// inbox, and reads the capability (notify_capability) after its push - by
// which time the woken thread may have run, main may have returned, and
// run() may be freeing the capabilities (ThreadSanitizer caught exactly
// that in the ticker test).  So such a waker counts itself in
// process.outside_wakers (seq_cst) before its push and leaves after its
// notify; run_main waits for the count to reach zero before it frees
// anything.  The increment precedes the push, which precedes the woken
// thread's run and everything after it, so run_main cannot miss a waker
// that is still inside.  Runtime threads need no count: run() waits for
// their OS threads anyway.
namespace {
struct OutsideWake {
  bool outside;
  explicit OutsideWake(bool o) noexcept : outside(o) {
    if (outside) process.outside_wakers.fetch_add(1, std::memory_order_seq_cst);
  }
  ~OutsideWake() {
    if (outside) process.outside_wakers.fetch_sub(1, std::memory_order_seq_cst);
  }
};
}  // namespace

void wake(Thread* t) noexcept {
  if (rt.tracing) [[unlikely]]
    trace_wake(t);  // Note [Wake-up flows]
  t->state = ThreadState::runnable;
  t->why = WhyBlocked::not_blocked;
  Task* task = my_task_before_switch();  // wake never switches
  Capability* mine = task ? task->cap : nullptr;
  if (mine) {
    if (mine->current && !t->locked) t->cap = mine;
    if (t->cap == mine) {
      mine->run_queue.push_back(t);
      return;
    }
  }
  Capability* target = t->cap;
  OutsideWake guard(task == nullptr);  // Note [Waking from outside]
  target->inbox.push(t);
  notify_capability(target);
}

void wake_home(Thread* t) noexcept {
  if (rt.tracing) [[unlikely]]
    trace_wake(t);  // Note [Wake-up flows]
  t->state = ThreadState::runnable;
  t->why = WhyBlocked::not_blocked;
  Capability* home = t->cap;  // read before the push: t may run at once after it
  Task* task = my_task_before_switch();
  if (task && task->cap == home) {
    home->run_queue.push_back(t);
    return;
  }
  OutsideWake guard(task == nullptr);  // Note [Waking from outside]
  home->inbox.push(t);
  notify_capability(home);
}

}  // namespace capstan::rts
