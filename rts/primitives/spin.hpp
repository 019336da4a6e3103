// spin.hpp - waiting briefly for another OS thread: spin, then yield.
//
// Every busy-wait in the runtime (SpinLock, an mvar's lock - also a spark gate's,
// a killer or timer retrying a lock it may only try) waits for a holder
// that is running *now* and will be done in a few instructions.  But the
// holder is an OS thread the kernel may deschedule at any moment; a waiter
// that only spun would then burn its whole timeslice.  So a wait spins with
// the CPU's pause hint for kSpinTurns turns, then gives the OS thread away
// (sched_yield) on every later turn.
#pragma once

#include <sched.h>

namespace capstan::rts {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline constexpr unsigned kSpinTurns = 128;

// spin_turn is one turn of a wait, `turns` counting the turns so far.
inline void spin_turn(unsigned& turns) noexcept {
  if (turns < kSpinTurns) {
    ++turns;
    cpu_relax();
  } else {
    sched_yield();
  }
}

// SpinWait: one per wait; call turn() once per failed check.
class SpinWait {
 public:
  void turn() noexcept { spin_turn(turns_); }

 private:
  unsigned turns_ = 0;
};

}  // namespace capstan::rts
