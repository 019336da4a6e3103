// fates.hpp - how each thread of a run ended, for state_of (GHC's
// threadStatus): finished (its function returned) or died (an exception
// ended it).
//
// A Thread object is recycled as soon as its thread ends, so the fate must
// be kept elsewhere: one bit per thread id, in chunks of 64 Ki ids that
// are allocated only when a thread in their range dies.  A run that never
// kills pays nothing; one that kills a million threads keeps at most a few
// hundred KB.  Rejected: keeping ended Thread objects while an id refers to
// them (GHC's way, through its GC) - C++ cannot see who holds a thread_id.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "primitives/spinlock.hpp"

namespace capstan::rts {

class Fates {
 public:
  // died records that thread `id` ended by an exception.
  void died(std::uint64_t id) {
    lock_.lock();
    auto& chunk = chunks_[id >> kShift];
    if (!chunk) chunk = std::make_unique<std::uint64_t[]>(kWords);
    std::uint64_t bit = id & kMask;
    chunk[bit / 64] |= std::uint64_t{1} << (bit % 64);
    lock_.unlock();
  }
  // has_died: did thread `id` (which has ended) end by an exception?
  bool has_died(std::uint64_t id) {
    lock_.lock();
    auto it = chunks_.find(id >> kShift);
    std::uint64_t bit = id & kMask;
    bool d = it != chunks_.end() && (it->second[bit / 64] >> (bit % 64) & 1);
    lock_.unlock();
    return d;
  }

 private:
  static constexpr unsigned kShift = 16;
  static constexpr std::uint64_t kMask = (std::uint64_t{1} << kShift) - 1;
  static constexpr std::size_t kWords = (std::size_t{1} << kShift) / 64;
  SpinLock lock_;
  std::unordered_map<std::uint64_t, std::unique_ptr<std::uint64_t[]>> chunks_;  // [lock: lock_]
};

}  // namespace capstan::rts
