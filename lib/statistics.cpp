// statistics.cpp - the +RTS -s summary.
#include "capstan/statistics.hpp"

#include <fmt/format.h>

#include <iterator>

namespace capstan {

namespace {
double secs(std::chrono::nanoseconds ns) { return static_cast<double>(ns.count()) / 1e9; }
double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
}  // namespace

std::string runtime_statistics::summary() const {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "capstan runtime statistics (+RTS -s)\n");
  fmt::format_to(it, "  threads: {} created, {} finished, {} killed, {} abandoned, "
      "{} ended by an uncaught exception, {} blocked indefinitely\n",
      threads_created, threads_finished, threads_killed, threads_abandoned, uncaught_exceptions,
      blocked_indefinitely);
  if (threads_unstarted)
    fmt::format_to(it, "  threads that ended unstarted, no memory for their stacks: {}\n",
                   threads_unstarted);
  fmt::format_to(it, "  asynchronous exceptions raised: {}; deadlocks detected: {}, not "
      "confirmed (outside OS threads): {}\n", async_exceptions, deadlocks_detected,
      deadlock_checks_skipped);
  fmt::format_to(it, "  peak live threads: {} (sampled every tick)\n", peak_live_threads);
  fmt::format_to(it, "  context switches: {}\n", context_switches);
  fmt::format_to(it, "  tasks (OS threads): {} created, {} running now; {} in-call threads, "
                 "{} of them queued for a capability\n",
                 tasks_created, os_threads, incall_threads, incalls_queued);
  if (biased_locks)
    fmt::format_to(it, "  mvar locks: biased to the one capability, {} revoked by other OS "
                   "threads\n", lock_revocations);
  if (spare_starts_refused)
    fmt::format_to(it, "  spare OS threads the OS refused to start (their work waited and was "
                   "retried): {}\n", spare_starts_refused);
  fmt::format_to(it, "  SPARKS: {} ({} converted, {} overflowed, {} dud, {} GC'd, {} fizzled)\n",
                 sparks.total(), sparks.converted, sparks.overflowed, sparks.dud, sparks.gcd,
                 sparks.fizzled);
  fmt::format_to(it, "  stacks: peak {} in use ({:.1f} MiB reserved), {} guarded, {} mappings\n",
      peak_stacks_in_use, mib(peak_stack_bytes), guarded_stacks, stack_mappings);
  fmt::format_to(it, "  peak RSS: {:.1f} MiB\n", mib(peak_rss_bytes));
  for (std::size_t i = 0; i < capabilities.size(); ++i) {
    const auto& c = capabilities[i];
    fmt::format_to(it, "  cap {}: busy {:.3f}s idle {:.3f}s, {} switches, {} created, {} pushed, {} received, "
        "{} stolen from a stalled capability, {} sleeps, {} of {} steal requests answered with a spark, "
        "{} handed to a spare during a safe call\n",
        i, secs(c.busy), secs(c.idle), c.context_switches, c.threads_created, c.threads_pushed,
        c.threads_received, c.threads_stolen, c.sleeps, c.steals, c.steal_attempts,
        c.safe_call_handoffs);
  }
  fmt::format_to(it, "  elapsed: {:.3f}s\n", secs(elapsed));
  return out;
}

}  // namespace capstan
