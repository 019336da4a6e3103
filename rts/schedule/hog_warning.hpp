// hog_warning.hpp - naming a thread that keeps a capability to itself
// (+RTS --warn-hog=<ms>).  See Note [Warning about a hog] in
// schedule/hog_warning.cpp.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

namespace capstan::rts {

// HogWarner: called by the ticker on every tick.
class HogWarner {
 public:
  // tick looks at every capability; `period_ns` is the ticker's period.
  void tick(std::int64_t period_ns);

 private:
  struct Seen {
    std::uint64_t epoch = 0;      // the capability's sched_epoch when last changed
    std::int64_t since_ns = 0;    // when it last changed (0: idle, not watched)
    std::uint64_t most_waiting = 0;  // most threads seen waiting behind it since
    std::uint64_t ticks = 0;         // ticks that saw the epoch unchanged
    int tid = 0;                     // its Task's OS thread (0: not read yet, -1: none)
    std::int64_t cpu_ns = -1;        // that OS thread's CPU time then (-1: unknown)
    std::int64_t queued_ns = -1;     // how long it had waited for a CPU then (-1: unknown)
    std::int64_t base_ns = 0;        // when the two were read
  };
  std::vector<Seen> seen_;                 // [ticker] per capability
  std::unordered_set<std::uint64_t> warned_;  // [ticker] thread ids named already
};

}  // namespace capstan::rts
