// park.hpp - parking the running thread on an object it waits for (an
// mvar, a spark's gate): park_current.
//
// Header-only, like switch.hpp and pick.hpp: the mvar waits
// (rts/mvar/mvar_core.cpp) are the only callers, and a blocking take is on
// every hand-off, so each inlines it rather than call into another
// translation unit.
#pragma once

#include <atomic>

#include "schedule/pick.hpp"
#include "schedule/switch.hpp"

namespace capstan::rts {

// Note [Blocking on an MVar]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The blocker enqueues its waiter and marks itself blocked while holding
// the mvar's lock, then switches away *still holding it*; the landing side
// releases it (post.unlock).  A waker must take that lock to find the
// waiter, so it cannot see the blocked thread before its context is fully
// saved: no thread is ever resumed half-switched, and no wake-up is lost
// because the check ("is the mvar empty?") and the enqueue happen under the
// same lock the waker takes.  The waker dequeues the waiter under the lock,
// which gives it alone the right to wake the thread: a thread is woken
// exactly once per block.
// Checked by models/mvar_block.pml (docs/models.md).
//
// park_current blocks `cur`, the thread `task` is running; `unlock_after`
// is released once its context is saved.
[[gnu::always_inline]] static inline void park_current(Task* task, Thread* cur,
                                                       std::atomic<bool>* unlock_after) {
  Capability* cap = task->cap;
  cur->state = ThreadState::blocked;
  cur->why = WhyBlocked::on_mvar;
  Thread* next = pick(cap);
  task->post.unlock = unlock_after;
  switch_to(task, cap, cur, next, false, SwitchWhy::blocked);
}

}  // namespace capstan::rts
