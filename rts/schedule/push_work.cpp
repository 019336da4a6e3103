// push_work.cpp - busy capabilities hand surplus threads to idle ones.
//
// Note [Pushing work]
// ~~~~~~~~~~~~~~~~~~~
// GHC's schedulePushWork: a capability with surplus runnable threads hands
// some to an idle capability, rather than idle capabilities stealing them.
// The run queue stays owner-private (no fences on the hot path).  A push
// happens only when it can pay off:
//  * some capability is idle (rt.n_idle(), a relaxed hint: a stale read costs one
//    missed or one useless push, never correctness);
//  * at least kPushThreshold threads wait; and
//  * the queue has stayed long for kLongQueueNs: it has not emptied since we
//    first saw it long (Capability::long_queue_since_ns).  Shipping a thread
//    to another core costs a few hundred ns of cache traffic (its Thread
//    object, closure and data move), more than a tiny thread's whole run,
//    so short bursts of tiny threads stay local (threads001 at -N2 went
//    from 97 to 189 ns per thread when every burst was split; see
//    docs/benchmarks.md), while a queue that stays long is real work worth
//    a second core.
//  * a CPU is free for the target: busy capabilities are fewer than the
//    CPUs in the affinity mask (rt.n_cpus), the rule of Note [Spinning only
//    on a free CPU] in idle.cpp.  With more capabilities than CPUs (-N4 on
//    two cores) a push to an idle capability when every CPU already runs a
//    busy one only adds an OS thread for the kernel to time-slice in, and
//    every hand-off between the two halves of the work then waits for it:
//    threads003 at -N4 pushed 170,000-240,000 threads per capability and
//    took 48 ns per hop against 19 ns at -N2.  With the rule, and the
//    target below, 20 ns at -N4 and 19 ns at -N8 (docs/benchmarks.md).
// Half of the waiting threads go, oldest first, to one idle capability -
// one still spinning if there is one (awake: no futex wake-up), else the
// lowest-numbered, so that the same few capabilities take the work and
// the others stay asleep (a rotation from our own number, as before, woke
// every capability in turn);
// locked threads (fork_on, bound) never move, nor does a thread still
// leaving its stack (Note [Requeued while still running] in steal.cpp).  A sequential chain of
// hand-offs (ping-pong, a token ring) never has more than one thread
// waiting, so it is never spread across capabilities, where every hand-off
// would cost a cross-core wake-up (the GHC -N2 collapse).
#include <cstdint>

#include "primitives/clock.hpp"
#include "primitives/runtime_work.hpp"
#include "schedule/pick.hpp"
#include "schedule/steal.hpp"
#include "task/handover.hpp"

namespace capstan::rts {

namespace {
constexpr std::int64_t kLongQueueNs = 50'000;
}  // namespace

void push_work(Capability* cap) {
  unsigned busy = rt.n_caps - rt.n_idle(std::memory_order_relaxed);
  if (busy >= rt.n_cpus) return;  // no free CPU: see the Note
  // The target: an idle capability that is still spinning (awake: no
  // futex wake-up), else the lowest-numbered idle one, so that the same
  // few capabilities take the work and the rest stay asleep.
  Capability* target = nullptr;
  for (Capability* c : rt.caps) {
    if (c == cap || !c->idle.load(std::memory_order_relaxed)) continue;
    if (c->hold.load(std::memory_order_relaxed) == Hold::held) {  // spinning
      target = c;
      break;
    }
    if (!target) target = c;
  }
  if (!target) return;
  std::size_t k = cap->run_queue.size() / 2;
  // Half of a long queue takes a while: Note [Warning about a hog].
  RuntimeWork mark(k >= kLongLoop ? &cap->runtime_loop : nullptr);
  Thread* first = nullptr;
  Thread* last = nullptr;
  Thread* kept = nullptr;  // threads that stay, newest first
  std::uint64_t moved = 0;
  for (std::size_t i = 0; i < k; ++i) {
    Thread* t = cap->run_queue.pop_front();
    if (!t) break;  // a thief took the rest (Note [Stealing from a stalled capability])
    // Locked threads never move; nor does the thread this capability is
    // leaving, requeued while still on its stack (`leaving`; pick can run
    // after requeue_running, and a thread let in first can put it behind
    // the front: Note [Requeued while still running] in steal.cpp).  Both
    // keep their places.  Acquire, as steal_front: pairs with the landing
    // side's release for a thread another Task requeued.
    if (t->locked || t->leaving.load(std::memory_order_acquire)) {
      t->link = kept;
      kept = t;
      continue;
    }
    t->cap = target;
    t->link = nullptr;
    if (last) last->link = t; else first = t;
    last = t;
    ++moved;
  }
  while (kept) {
    Thread* next = kept->link;
    cap->run_queue.push_front(kept);
    kept = next;
  }
  if (!moved) return;
  target->inbox.push_chain(first, last);
  cap->threads_pushed.add(moved);
  notify_capability(target);
}

[[gnu::noinline]] bool long_queue_wants_push(Capability* cap) {
  if (cap->push_check_countdown-- != 0) return false;
  cap->push_check_countdown = 15;
  std::int64_t now = now_ns();
  if (cap->long_queue_since_ns == 0) {
    cap->long_queue_since_ns = now;
    // The thread we are about to run may never come back to a scheduling
    // point: Note [Stealing from a stalled capability].
    wake_watcher(now);
    return false;
  }
  return now - cap->long_queue_since_ns >= kLongQueueNs;
}

}  // namespace capstan::rts
