// deadlock.hpp - deadlock detection (GHC's resurrectThreads), driven by the
// ticker.  See Note [Deadlock detection] in exception/deadlock.cpp.
#pragma once

namespace capstan::rts {

enum class DeadlockTick : unsigned char {
  none,        // something runs, or may still wake a thread
  suspected,   // quiet this tick: confirmed if still quiet at the next
  stood_down,  // a deadlock, but an outside OS thread could end it: re-check later
  broken,      // every blocked thread was sent blocked_indefinitely
  unsettled,   // not quiet, but only for a state that can end without any
               // capability leaving idle(): the ticker must not park on it
};

// deadlock_tick: the ticker's check, each tick on which no capability was
// busy.  Ticker thread only.
DeadlockTick deadlock_tick();
// deadlock_reset: a tick on which some capability was busy.
void deadlock_reset();
// deadlock_recheck: the parked ticker's later look after a stand-down:
// deadlock_tick with the quiet state of the stand-down taken as already
// suspected, so a run still in that state is judged at once - `stood_down`
// while an outside thread remains, `broken` once none does; `suspected` or
// `none` if anything moved.  Ticker thread only.
DeadlockTick deadlock_recheck();

// shutdown_tick: the same check during shutdown, for the threads shutdown
// cannot kill (Note [Blocked while unwinding] in shutdown/shutdown.cpp),
// with main parked in shutdown_protocol: `suspected` (quiet this tick: do
// not wake main, so that nothing moves until the next), `broken` (quiet
// two ticks running: rt.shutdown_stuck is set), else `none`.  Ticker only.
DeadlockTick shutdown_tick();

}  // namespace capstan::rts
