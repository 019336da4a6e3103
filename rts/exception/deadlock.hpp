// deadlock.hpp - deadlock detection (GHC's resurrectThreads), driven by the
// ticker.  See Note [Deadlock detection] in exception/deadlock.cpp.
#pragma once

namespace capstan::rts {

enum class DeadlockTick : unsigned char {
  none,        // something runs, or may still wake a thread
  suspected,   // quiet this tick: confirmed if still quiet at the next
  stood_down,  // a deadlock, but an outside OS thread could end it: re-check later
  broken,      // every blocked thread was sent blocked_indefinitely
};

// deadlock_tick: the ticker's check, each tick on which no capability was
// busy.  Ticker thread only.
DeadlockTick deadlock_tick();
// deadlock_reset: a tick on which some capability was busy.
void deadlock_reset();

}  // namespace capstan::rts
