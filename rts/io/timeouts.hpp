// timeouts.hpp - timeout()'s frames and their timers.
// See Note [Timeouts] in io/timeouts.cpp.
#pragma once

#include "thread/thread.hpp"

namespace capstan::rts {

// arm_timeouts registers an IO-manager timer for each of cur's timeout
// frames that has none: cur (the running thread) is about to block, so no
// safe point will notice its deadlines.
void arm_timeouts(Thread* cur);

}  // namespace capstan::rts
