// push_work.cpp - busy capabilities hand surplus threads to idle ones.
//
// Note [Pushing work]
// ~~~~~~~~~~~~~~~~~~~
// GHC's schedulePushWork: a capability with surplus runnable threads hands
// some to an idle capability, rather than idle capabilities stealing them.
// The run queue stays owner-private (no fences on the hot path).  A push
// happens only when it can pay off:
//  * some capability is idle (n_idle, a relaxed hint: a stale read costs one
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
// Half of the waiting threads go, oldest first, to one idle capability;
// locked threads (fork_on, bound) never move.  A sequential chain of
// hand-offs (ping-pong, a token ring) never has more than one thread
// waiting, so it is never spread across capabilities, where every hand-off
// would cost a cross-core wake-up (the GHC -N2 collapse).
#include <cstdint>

#include "primitives/clock.hpp"
#include "schedule/pick.hpp"
#include "schedule/steal.hpp"
#include "task/handover.hpp"

namespace capstan::rts {

namespace {
constexpr std::int64_t kLongQueueNs = 50'000;
}  // namespace

void push_work(Capability* cap) {
  Capability* target = nullptr;
  for (unsigned i = 1; i < rt.n_caps; ++i) {
    Capability* c = rt.caps[(cap->no + i) % rt.n_caps];
    if (c->idle.load(std::memory_order_relaxed)) {
      target = c;
      break;
    }
  }
  if (!target) return;
  std::size_t k = cap->run_queue.size() / 2;
  Thread* first = nullptr;
  Thread* last = nullptr;
  std::uint64_t moved = 0;
  for (std::size_t i = 0; i < k; ++i) {
    Thread* t = cap->run_queue.pop_front();
    if (!t) break;  // a thief took the rest (Note [Stealing from a stalled capability])
    if (t->locked) {
      cap->run_queue.push_back(t);
      continue;
    }
    t->cap = target;
    t->link = nullptr;
    if (last) last->link = t; else first = t;
    last = t;
    ++moved;
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
    wake_watcher(cap, now);
    return false;
  }
  return now - cap->long_queue_since_ns >= kLongQueueNs;
}

}  // namespace capstan::rts
