// pick.hpp - choosing the next thread to run on a capability.
//
// Header-only for the same reason as switch.hpp: every place that stops a
// thread picks its successor itself (Note [Direct switching]), and each
// inlines pick as it did when they were one translation unit.
#pragma once

#include <cstddef>

#include "capability/capability.hpp"
#include "runtime/runtime.hpp"
#include "sparks/pool.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

// A capability pushes work to idle ones when this many threads wait in its
// run queue.  See Note [Pushing work] in schedule/push_work.cpp.
inline constexpr std::size_t kPushThreshold = 4;

// long_queue_wants_push: the slow half of the push test in pick (Note
// [Pushing work]); reads the clock on every 16th call at most.
[[gnu::noinline]] bool long_queue_wants_push(Capability* cap);
// push_work hands half of cap's waiting threads to an idle capability.
void push_work(Capability* cap);

// pick_behind returns the next thread to run on cap, or null; when the
// run queue gave it a thread (returned, or another Task's bound thread
// left in bound_next), `behind` (if not null) has joined the back of the
// queue in the same hand-shake.  `behind` must already be marked as
// leaving (requeue_running's first half, mark_leaving).  The caller has
// checked that bound_next is clear (pick does; a yield does before it
// marks itself, and the marks' stores would make the compiler load it
// again here).
[[gnu::always_inline]] static inline Thread* pick_behind(Capability* cap, Thread* behind) {
  // A scheduling decision: the epoch tells the hog warner and the stall
  // watchers that this capability made progress (Note [Warning about a
  // hog], Note [Stealing from a stalled capability]); release, for the
  // warner's acquire load of it.
  cap->sched_epoch.store(cap->sched_epoch.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);
  if (rt.stop.load(std::memory_order_relaxed)) [[unlikely]] return nullptr;
  drain_inbox(cap);
  poll_spark_requests(cap);
  std::size_t left;
  Thread* t = cap->run_queue.pop_front(&left, behind);
  if (left == 0) {
    cap->long_queue_since_ns = 0;
  } else if (left >= kPushThreshold &&
             rt.n_idle(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (long_queue_wants_push(cap)) push_work(cap);
  }
  // Note [Bound threads]: another Task's bound thread is run by that Task;
  // our caller switches to the scheduler context, which gives it away.
  if (t && t->bound_task && t->bound_task != cap->running_task.load(std::memory_order_relaxed))
      [[unlikely]] {
    cap->bound_next = t;
    return nullptr;
  }
  return t;
}

// pick returns the next thread to run on cap, or null.
[[gnu::always_inline]] static inline Thread* pick(Capability* cap) {
  if (cap->bound_next) [[unlikely]] return nullptr;  // the scheduler context gives it away first
  return pick_behind(cap, nullptr);
}

}  // namespace capstan::rts
