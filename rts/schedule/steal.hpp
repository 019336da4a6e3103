// steal.hpp - idle capabilities take threads from a capability that has
// stopped scheduling.  Note [Stealing from a stalled capability] in
// schedule/steal.cpp.
#pragma once

#include "capability/capability.hpp"

namespace capstan::rts {

// What one look at the other capabilities found.
enum class StallLook {
  nothing,   // no capability with waiting threads has stopped scheduling
  watching,  // one has, for a while but less than kStallNs: keep looking
  stole,     // threads were moved into our run queue
};

// look_for_stalls: called by `cap`'s holder while idle; moves threads from
// a capability that has had threads waiting and made no progress (no
// scheduling decision, no fork) for kStallNs into cap's run queue.
StallLook look_for_stalls(Capability* cap);

// watch_requested: did a busy capability ask to be watched (wake_watcher)
// so recently that an idle one should not go to sleep yet?
bool watch_requested(std::int64_t now);

// wake_watcher: the caller's capability saw its run queue turn long while
// some capability idles: have an idle one watch it, in case the thread it
// is about to run never returns to the scheduler.
// `now` is the caller's clock reading.
void wake_watcher(std::int64_t now) noexcept;

// StallTicker: the ticker's backstop for stalls that began while every
// idle capability slept.  tick() wakes an idle capability when a busy one
// with waiting threads made no scheduling decision since the last tick.
class StallTicker {
 public:
  void tick();

 private:
  std::vector<std::uint64_t> epochs_;  // [ticker] sched_epoch at the last tick
};

}  // namespace capstan::rts
