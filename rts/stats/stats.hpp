// stats.hpp - the runtime's statistics: live counts, peaks, snapshots
// (GHC's Stats.c).  The counters themselves live where they are bumped
// (Capability, Runtime; primitives/counter.hpp); +RTS -s formatting is in
// lib/statistics.cpp.
#pragma once

#include <cstdint>

#include "capstan/statistics.hpp"
#include "runtime/runtime.hpp"

namespace capstan::rts {

// Sum of a per-capability counter.
template <class F>
std::uint64_t sum_caps(F f) {
  std::uint64_t s = 0;
  for (Capability* c : rt.caps) s += f(*c);
  return s;
}

// live_threads: threads created and not yet finished, in-call threads included.
std::uint64_t live_threads();
// sample_peaks raises the peak live-thread and stacks-in-use counts to now's.
void sample_peaks();
// snapshot_statistics reads every counter of the run in progress.
runtime_statistics snapshot_statistics();

}  // namespace capstan::rts
