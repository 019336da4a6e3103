// statistics.hpp - runtime counters (what +RTS -s prints at exit).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace capstan {

struct capability_statistics {
  std::uint64_t threads_created = 0;   // forked on this capability
  std::uint64_t context_switches = 0;  // switches into a green thread
  std::uint64_t threads_pushed = 0;    // sent to idle capabilities (schedulePushWork)
  std::uint64_t threads_received = 0;  // arrived through the inbox
  std::uint64_t sleeps = 0;            // times the OS thread parked while idle
  std::uint64_t steal_attempts = 0;    // spark requests sent to other capabilities (an early one once answered with a spark)
  std::uint64_t steals = 0;            // ... answered with a spark
  std::uint64_t threads_stolen = 0;    // taken from a stalled capability's run queue
  std::uint64_t safe_call_handoffs = 0;  // given to a spare Task while its Task was in a safe call
  std::chrono::nanoseconds busy{0};    // time not idle
  std::chrono::nanoseconds idle{0};    // time idle (spinning or asleep)
};

// GHC's spark categories (+RTS -s SPARKS line).  Every spark is exactly one
// of: converted, overflowed, dud, gcd, fizzled (or still in a pool while
// running): created + overflowed + dud == total.
struct spark_statistics {
  std::uint64_t created = 0;     // entered a pool
  std::uint64_t converted = 0;   // run by a spark thread on an idle capability
  std::uint64_t overflowed = 0;  // pool full: dropped, run inline by get()
  std::uint64_t dud = 0;         // already evaluated when sparked (never, in C++)
  std::uint64_t gcd = 0;         // discarded unevaluated (destroyed unforced, or at shutdown)
  std::uint64_t fizzled = 0;     // evaluated by its maker's get() before anyone took it
  std::uint64_t total() const { return created + overflowed + dud; }
};

struct runtime_statistics {
  std::vector<capability_statistics> capabilities;
  std::uint64_t threads_created = 0;
  std::uint64_t threads_finished = 0;
  std::uint64_t threads_killed = 0;       // ended by thread_killed (kill_thread, or shutdown)
  std::uint64_t threads_died = 0;         // ended by any exception (killed ones included)
  std::uint64_t threads_unstarted = 0;    // ended before they ran: no memory for a stack (in threads_died)
  std::uint64_t async_exceptions = 0;     // raised by throw_to, kill_thread, timeout or deadlock detection
  std::uint64_t deadlocks_detected = 0;   // times every thread was blocked for good
  std::uint64_t deadlock_checks_skipped = 0; // deadlocks unconfirmed: an outside OS thread could wake them
  std::uint64_t threads_abandoned = 0;    // still alive after the shutdown grace period
  std::uint64_t uncaught_exceptions = 0;  // forked threads ended by an exception
  std::uint64_t blocked_indefinitely = 0; // ended quietly: their mvar was destroyed
  std::uint64_t context_switches = 0;
  std::uint64_t incall_threads = 0;       // threads started by call_in (in threads_created)
  std::uint64_t incalls_queued = 0;       // call_in calls that found no capability free and waited to be handed one
  std::uint64_t tasks_created = 0;        // Tasks (OS threads) made: workers, spares, fork_os, in-call
  std::uint64_t spare_starts_refused = 0; // spare OS threads the OS would not start (the work waited and was retried)
  std::uint64_t os_threads = 0;           // runtime-made OS threads running now (not main, ticker)
  bool biased_locks = false;              // mvar locks biased to the capability's holder (-N1)
  std::uint64_t lock_revocations = 0;     // ... and that bias revoked by another OS thread
  spark_statistics sparks;
  std::uint64_t live_threads = 0;
  std::uint64_t peak_live_threads = 0;    // sampled every tick, at shutdown and per snapshot
  std::uint64_t stacks_in_use = 0;
  std::uint64_t peak_stacks_in_use = 0;
  std::uint64_t peak_stack_bytes = 0;     // peak_stacks_in_use * reserved size
  std::uint64_t stack_mappings = 0;       // mmap regions holding stacks
  std::uint64_t guarded_stacks = 0;       // stacks with a guard page
  std::uint64_t peak_rss_bytes = 0;       // whole process (getrusage)
  std::chrono::nanoseconds elapsed{0};

  // summary renders the +RTS -s report.
  std::string summary() const;
};

// statistics returns a snapshot of the running runtime's counters; after
// run() returns it returns the final counters of the last run.
runtime_statistics statistics();

}  // namespace capstan
