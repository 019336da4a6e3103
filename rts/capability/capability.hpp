// capability.hpp - Capability: a virtual CPU (+RTS -N).
//
// A Capability is the token that licenses one Task (OS thread) to run green
// threads, plus the scheduler state that goes with it (GHC's Capability.h).
// Every field states who may touch it:
//   [owner]   only the Task currently running the capability;
//   [atomic]  anyone, with the orderings stated at the use;
//   [lock:X]  under lock X.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "capability/run_queue.hpp"
#include "primitives/spinlock.hpp"
#include "storage/stack.hpp"
#include "storage/thread_slabs.hpp"
#include "capstan/spark.hpp"
#include "capability/inbox.hpp"

namespace capstan::rts {

struct Task;

// Bits of Capability::context_switch.  See Note [Requeue front or back].
inline constexpr std::uint32_t kTimesliceExpired = 1;  // ticker: go to the back
inline constexpr std::uint32_t kInterrupt = 2;         // stop-the-world: keep your place
inline constexpr std::uint32_t kReturning = 4;         // a safe call returned: let it in first

// Who holds a capability.  See Note [Handing over a capability].
enum class Hold : std::uint8_t {
  held,      // running_task holds it and is awake
  sleeping,  // running_task holds it and is parked in idle()
  free,      // nobody holds it; whoever CASes free -> held owns it
};

// A counter written only by its owner and read by anyone (statistics):
// relaxed load+store, no read-modify-write, so no locked instruction.
struct OwnerCounter {
  std::atomic<std::uint64_t> v{0};
  void add(std::uint64_t n = 1) { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  std::uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

struct alignas(64) Capability {
  unsigned no = 0;

  // --- owner state ---------------------------------------------------------
  RunQueue run_queue;              // [owner]
  Thread* current = nullptr;       // [owner] the running green thread, null in the scheduler
  Thread* handoff = nullptr;       // [owner] picked, but bound to another Task: hand over
  StackPool stacks;                // [owner]
  ThreadCache threads;             // [owner] recycled Thread objects
  std::int64_t backlog_since_ns = 0;  // [owner] Note [Pushing work]: 0 = no backlog seen
  unsigned push_check_countdown = 0;  // [owner] reads the clock every few picks only
  std::uint64_t next_id = 0;       // [owner] ids handed out in blocks
  std::uint64_t id_end = 0;        // [owner]

  // --- statistics: written by the owner, read by anyone --------------------
  OwnerCounter threads_created, threads_finished, threads_killed, uncaught_exceptions;
  OwnerCounter threads_blocked_indefinitely;
  OwnerCounter context_switches, threads_pushed, threads_received, sleeps;
  OwnerCounter idle_ns, stacks_allocated, stacks_freed;
  OwnerCounter sparks_converted, steal_attempts, steals;

  // --- shared with other capabilities --------------------------------------
  alignas(64) Inbox inbox;                     // [atomic] see inbox.hpp
  std::atomic<std::uint32_t> context_switch{0};  // [atomic] ticker/interrupters set, owner clears
  std::atomic<bool> idle{false};               // [atomic] owner sets; pushers read as a hint
  std::atomic<Hold> hold{Hold::held};          // [atomic] Note [Handing over a capability]
  std::atomic<Task*> running_task{nullptr};    // [holder writes; anyone reads to unpark it]
  std::atomic<std::uint64_t> sched_epoch{0};   // [owner writes, release] +1 per scheduling decision

  // Sparks: see Note [Spark pools] in sparks/sparks.cpp.
  alignas(64) detail::spark_pool sparks;       // [owner] (+ request: [atomic])
  std::atomic<detail::spark_base*> steal_box{nullptr};  // [atomic] a victim's answer to our request
  std::atomic<bool> spark_wake{false};         // [atomic] woken to look for sparks
  std::uint64_t steal_seed = 0;                // [owner] victim order
  // A victim answers with up to kStealBatch sparks: the first in steal_box,
  // the rest here (written before steal_box's release store).
  static constexpr unsigned kStealBatch = 8;
  detail::spark_base* steal_batch[kStealBatch] = {};  // [victim writes, then thief owns]
  unsigned steal_batch_n = 0;
  detail::spark_base* backlog[kStealBatch] = {};      // [owner] stolen, not yet run
  unsigned backlog_n = 0;                             // [owner]

  // Spare Tasks parked until given this capability.
  SpinLock spare_lock;
  Task* spares = nullptr;   // [lock:spare_lock]
  unsigned n_spares = 0;    // [lock:spare_lock]

  // All live threads whose home is this capability (for shutdown).
  SpinLock all_lock;
  Thread* all_head = nullptr;  // [lock:all_lock]
};

}  // namespace capstan::rts
