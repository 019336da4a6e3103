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
#include "primitives/biased_spinlock.hpp"
#include "primitives/counter.hpp"
#include "primitives/spinlock.hpp"
#include "storage/stack.hpp"
#include "storage/thread_slabs.hpp"
#include "thread/thread_ids.hpp"
#include "capstan/spark.hpp"
#include "capability/inbox.hpp"

namespace capstan::rts {

struct Task;
class TraceBuffer;

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

// What an idle capability last saw of another (the watcher's side of Note
// [Stealing from a stalled capability]).
struct StallWatch {
  std::uint64_t epoch = 0;     // its sched_epoch
  std::uint64_t created = 0;   // its threads_created
  std::int64_t since_ns = 0;   // when we first saw them so with threads waiting; 0 = not
};

struct alignas(64) Capability {
  unsigned no = 0;                 // [read-only while running]
  TraceBuffer* trace = nullptr;    // [start] its event buffer (+RTS -l), else null; written
                                   // by its holder (Note [Trace buffers])

  // --- owner state ---------------------------------------------------------
  RunQueue run_queue;              // [owner]
  Thread* current = nullptr;       // [owner] the running green thread, null in the scheduler
  Thread* bound_next = nullptr;    // [owner] picked, but bound to another Task: the
                                   // scheduler context gives the capability to that Task
  StackPool stacks;                // [owner]
  ThreadCache threads;             // [owner] recycled Thread objects
  std::int64_t long_queue_since_ns = 0;  // [owner] Note [Pushing work]: since when the run
                                         // queue has been long; 0 = it is not
  unsigned push_check_countdown = 0;  // [owner] reads the clock every few picks only
  std::vector<StallWatch> stall_watch;  // [owner] per capability: Note [Stealing from a
                                        // stalled capability] (schedule/steal.cpp)
  IdBlock ids;  // [owner writes, relaxed; anyone reads] Note [Thread ids]

  // --- statistics: written by the owner, read by anyone --------------------
  OwnerCounter threads_created, threads_finished, threads_killed, uncaught_exceptions;
  OwnerCounter threads_blocked_indefinitely, threads_died, async_raised;
  OwnerCounter threads_unstarted;  // no stack to be had (Note [Running out of stacks])
  OwnerCounter context_switches, threads_pushed, threads_received, sleeps;
  OwnerCounter idle_ns, stacks_allocated, stacks_freed;
  OwnerCounter sparks_converted, steal_attempts, steals, threads_stolen;
  OwnerCounter safe_call_handoffs;  // bumped by whoever holds the capability as it gives it away

  // --- shared with other capabilities --------------------------------------
  alignas(64) Inbox inbox;                     // [atomic] see inbox.hpp
  std::atomic<std::uint32_t> context_switch{0};  // [atomic] ticker/interrupters set, owner clears
  std::atomic<bool> idle{false};               // [atomic] owner sets; pushers read as a hint
  std::atomic<Hold> hold{Hold::held};          // [atomic] Note [Handing over a capability]
  std::atomic<Task*> running_task{nullptr};    // [holder writes, release; anyone reads to unpark
                                               // it; the hog warner reads with acquire]
  // [holder writes (relaxed) in take_capability; anyone reads, a hint]
  // held by an in-call's Task: Note [Spinning for a free capability]
  std::atomic<bool> held_by_incall{false};
  // [holder writes (relaxed); the ticker reads] safe calls entered with
  // work waiting: Note [Deferred hand-off] in foreign/safe_call.cpp
  std::atomic<std::uint32_t> deferred_calls{0};
  std::atomic<std::uint64_t> sched_epoch{0};   // [owner writes, release] +1 per scheduling decision
  // [holder writes: 1 relaxed, 0 release; enable_wait_locks reads, acquire]
  // the holder may be writing a wait field without Thread::wait_lock, having
  // read rt.waits_need_lock false: Note [Wait locks] in schedule/raise.cpp
  std::atomic<std::uint32_t> unlocked_wait_write{0};
  std::atomic<bool> runtime_loop{false};       // [owner writes, ticker reads; relaxed] its thread is
                                               // inside one of the runtime's loops over thousands
                                               // of threads: Note [Warning about a hog] in
                                               // schedule/hog_warning.cpp

  // Sparks: see Note [Spark pools] in sparks/pool.cpp.
  alignas(64) detail::spark_pool sparks;       // [owner] (+ request: [atomic])
  std::atomic<detail::spark_base*> steal_box{nullptr};  // [atomic] a victim's answer to our request
  std::atomic<bool> spark_wake{false};         // [atomic] woken to look for sparks, or
                                               // for a stalled capability (steal.cpp)
  std::uint64_t steal_seed = 0;                // [owner] victim order
  // A victim answers with up to kStealBatch sparks: the first in steal_box,
  // the rest here (written before steal_box's release store).  64, not 8:
  // a thief waits for an answer until the owner's next poll point, which a
  // long spark can put a millisecond away; with 8, imbalanced's thief spent
  // a fifth of its time waiting (98 requests for 1,023 sparks), -N2 76.1 ms
  // against 66.4 with 64 (the work alone: 64.8 per capability).  The
  // "quarter of the rest" rule (spark_respond) still leaves the owner most.
  static constexpr unsigned kStealBatch = 64;
  detail::spark_base* steal_batch[kStealBatch] = {};  // [victim writes, then thief owns]
  unsigned steal_batch_n = 0;                           // [victim writes, then thief owns]
  detail::spark_base* stolen_sparks[kStealBatch] = {};  // [owner] stolen, not yet run
  // [owner writes; atomic] the backlog's length.  Read by the ticker too
  // (a capability left free by a safe call may hold a backlog: Note
  // [Deferred hand-off]) and deadlock detection (resting).  Written with
  // the default seq_cst, a few per steal; the owner's own test in yield
  // reads it relaxed.
  std::atomic<unsigned> n_stolen_sparks{0};

  // Spare Tasks parked until given this capability.
  SpinLock spare_lock;      // guards the two below
  Task* spares = nullptr;   // [lock:spare_lock]
  unsigned n_spares = 0;    // [lock:spare_lock]

  // All live threads whose home is this capability (for shutdown), and
  // their labels (Thread::label).  See Note [Home lists].
  BiasedSpinLock all_lock;  // guards all_head, the all_prev/all_next links and labels
  Thread* all_head = nullptr;  // [lock:all_lock]
};

// drain_inbox moves the threads sent to `cap` into its run queue, in
// arrival order (the holder only).  A thread back from a safe call goes to
// the front: Note [Returning from a safe call] in foreign/safe_call.cpp.
// Thousands of arrivals at once (a latch released on another capability)
// take a while: see Note [Warning about a hog].
static inline void drain_inbox(Capability* cap) {
  if (!cap->inbox.maybe_nonempty()) return;
  if (std::size_t n = cap->run_queue.push_arrivals(cap->inbox.take_all(cap->runtime_loop))) {
    cap->threads_received.add(n);
    if (n >= kLongLoop) [[unlikely]] cap->runtime_loop.store(false, std::memory_order_relaxed);
  }
}

// has_threads: does a thread wait in `cap`'s run queue or inbox (the inbox
// read is a relaxed hint)?  The holder's test for "is there anything else
// to run here": a spark thread between sparks, a socket operation that
// would yield once before registering with the IO manager, a chan reader
// about to spin, and has_work's first half.
inline bool has_threads(const Capability* cap) {
  return !cap->run_queue.empty() || cap->inbox.maybe_nonempty();
}

// has_work: would `cap`'s holder find something to run?  Its run queue,
// its inbox (a relaxed hint: the hand-shakes of Note [Handing over a
// capability] catch a push it misses), its own sparks, sparks it stole and
// has not run, and a bound thread waiting to be given the capability.
// The one test for "may this capability be released, or must a Task run
// it" (release_capability, a safe call's entry).  An idle capability's
// wake-up test is a different question: see inbox_or_stop in schedule/idle.cpp.
inline bool has_work(const Capability* cap) {
  return has_threads(cap) || cap->sparks.size() != 0 || cap->n_stolen_sparks != 0 ||
         cap->bound_next != nullptr;
}

// interrupt_capability asks `cap`'s running thread to return to the
// scheduler at its next safe point, keeping its place at the front.
inline void interrupt_capability(Capability* cap) noexcept {
  cap->context_switch.fetch_or(kInterrupt, std::memory_order_relaxed);
}
// request_context_switch expires `cap`'s timeslice (what the ticker does).
inline void request_context_switch(Capability* cap) noexcept {
  cap->context_switch.fetch_or(kTimesliceExpired, std::memory_order_relaxed);
}

}  // namespace capstan::rts
