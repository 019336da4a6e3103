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
  std::chrono::nanoseconds busy{0};    // time not idle
  std::chrono::nanoseconds idle{0};    // time idle (spinning or asleep)
};

struct runtime_statistics {
  std::vector<capability_statistics> capabilities;
  std::uint64_t threads_created = 0;
  std::uint64_t threads_finished = 0;
  std::uint64_t threads_killed = 0;       // reclaimed at shutdown (thread_killed)
  std::uint64_t threads_abandoned = 0;    // still alive after the shutdown grace period
  std::uint64_t uncaught_exceptions = 0;  // forked threads ended by an exception
  std::uint64_t blocked_indefinitely = 0; // ended quietly: their mvar was destroyed
  std::uint64_t context_switches = 0;
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
