// idle.hpp - a capability with nothing to run.  Note [Sleeping
// capabilities] in schedule/idle.cpp.
#pragma once

#include "capability/capability.hpp"
#include "task/task.hpp"

namespace capstan::rts {

// idle runs spark threads if it finds sparks (own pool, or asked from
// others), spins, then parks `task` (holding `cap`) until work arrives in
// cap's inbox or the runtime stops.  Returns with cap held.
void idle(Task* task, Capability* cap);

// resting: nothing runs on cap and nothing waits for it - it is idle, or
// it is free (no Task holds it) with an empty run queue, inbox, spark pool
// and stolen-spark backlog (whose makers may wait in get()), as a bound
// or in-call Task leaves it when its thread finishes.  A
// free capability whose spare the OS refused keeps its work, sparks
// included, until the ticker's retry starts one (Note [No OS thread for a
// spare] in task/handover.cpp); a spark may be what a blocked thread waits
// for, so such a capability is not resting and deadlock detection stays
// quiet.  A hint (relaxed reads), for the ticker and deadlock detection,
// which act only on a state that held over two ticks.
inline bool resting(const Capability* c) noexcept {
  if (c->idle.load(std::memory_order_relaxed)) return true;
  return c->hold.load(std::memory_order_seq_cst) == Hold::free && c->run_queue.size() == 0 &&
         !c->inbox.nonempty_seq_cst() && c->sparks.size() == 0 &&
         c->n_stolen_sparks.load() == 0;
}

// ticker_judgement_changed: something the parked ticker's last judgement
// rested on has changed without a capability leaving idle() - the IO
// thread ended a wait that woke nobody (Note [Stopping the ticker] in
// runtime/ticker.cpp).  Counts as an exit from idle() for the ticker's
// re-check and wakes a parked ticker.  One RMW and a load: call it once
// per batch.
void ticker_judgement_changed() noexcept;

}  // namespace capstan::rts
