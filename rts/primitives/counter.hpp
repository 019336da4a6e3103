// counter.hpp - the runtime's statistics counters: one way to bump each kind.
//
//  * OwnerCounter: written only by its owner (a capability's holder), read
//    by anyone (statistics).  A relaxed load and store, no read-modify-write,
//    so no locked instruction on the hot paths that count.  The spark pool
//    counters in capstan/spark.hpp are bumped the same way (detail::bump).
//  * SharedCounter: written by any thread (Tasks created, in-call threads):
//    a relaxed fetch_add.  Only slow paths use one.
// Relaxed everywhere: a statistic is a snapshot, ordered with nothing.
#pragma once

#include <atomic>
#include <cstdint>

namespace capstan::rts {

struct OwnerCounter {
  std::atomic<std::uint64_t> v{0};
  // Always inline: two moves and an add, which GCC otherwise leaves as a
  // call in the big functions of a thread's life (thread_entry).
  [[gnu::always_inline]] void add(std::uint64_t n = 1) noexcept {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  // undo takes back an add whose event did not happen (still the owner).
  void undo(std::uint64_t n = 1) noexcept {
    v.store(v.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
  }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

struct SharedCounter {
  std::atomic<std::uint64_t> v{0};
  void add(std::uint64_t n = 1) noexcept { v.fetch_add(n, std::memory_order_relaxed); }
  // undo takes back one add of an event that turned out not to happen.
  void undo(std::uint64_t n = 1) noexcept { v.fetch_sub(n, std::memory_order_relaxed); }
  std::uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};

}  // namespace capstan::rts
