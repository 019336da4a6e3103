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

}  // namespace capstan::rts
