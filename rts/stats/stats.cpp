// stats.cpp - see stats.hpp.  Counters are read relaxed: a snapshot taken
// while threads run is approximate by nature; the final one (run_main, after
// every scheduler stopped) is exact.
#include "stats/stats.hpp"

#include <sys/resource.h>

#include <chrono>
#include <mutex>

#include "capstan/errors.hpp"
#include "capstan/thread.hpp"
#include "mvar/biased_locks.hpp"
#include "task/task.hpp"

namespace capstan::rts {

namespace {

void update_max(std::atomic<std::uint64_t>& peak, std::uint64_t v) {
  std::uint64_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

std::uint64_t live_threads() {
  std::uint64_t created = sum_caps([](Capability& c) { return c.threads_created.get(); }) +
                          rt.incall_threads_created.get();
  std::uint64_t finished = sum_caps([](Capability& c) { return c.threads_finished.get(); });
  return created - finished;
}

void sample_peaks() {
  update_max(rt.peak_live, live_threads());
  std::uint64_t a = sum_caps([](Capability& c) { return c.stacks_allocated.get(); });
  std::uint64_t f = sum_caps([](Capability& c) { return c.stacks_freed.get(); });
  update_max(rt.peak_stacks, a - f);
}

runtime_statistics snapshot_statistics() {
  runtime_statistics s;
  auto elapsed = std::chrono::steady_clock::now() - rt.started;
  s.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed);
  for (Capability* c : rt.caps) {
    capability_statistics cs;
    cs.threads_created = c->threads_created.get();
    cs.context_switches = c->context_switches.get();
    cs.threads_pushed = c->threads_pushed.get();
    cs.threads_received = c->threads_received.get();
    cs.threads_stolen = c->threads_stolen.get();
    cs.safe_call_handoffs = c->safe_call_handoffs.get();
    cs.sleeps = c->sleeps.get();
    cs.steal_attempts = c->steal_attempts.get();
    cs.steals = c->steals.get();
    s.sparks.created += c->sparks.created.load(std::memory_order_relaxed);
    s.sparks.overflowed += c->sparks.overflowed.load(std::memory_order_relaxed);
    s.sparks.fizzled += c->sparks.fizzled.load(std::memory_order_relaxed);
    s.sparks.gcd += c->sparks.gcd.load(std::memory_order_relaxed);
    s.sparks.converted += c->sparks_converted.get();
    cs.idle = std::chrono::nanoseconds(c->idle_ns.get());
    cs.busy = s.elapsed > cs.idle ? s.elapsed - cs.idle : std::chrono::nanoseconds(0);
    s.capabilities.push_back(cs);
    s.threads_created += cs.threads_created;
    s.context_switches += cs.context_switches;
    s.threads_finished += c->threads_finished.get();
    s.threads_killed += c->threads_killed.get();
    s.threads_died += c->threads_died.get();
    s.threads_unstarted += c->threads_unstarted.get();
    s.async_exceptions += c->async_raised.get();
    s.uncaught_exceptions += c->uncaught_exceptions.get();
    s.blocked_indefinitely += c->threads_blocked_indefinitely.get();
    s.stacks_in_use += c->stacks_allocated.get() - c->stacks_freed.get();
  }
  s.incall_threads = rt.incall_threads_created.get();
  s.incalls_queued = rt.incalls_queued.get();
  s.deadlocks_detected = rt.deadlocks_detected.get();
  s.deadlock_checks_skipped = rt.deadlock_stood_down.get();
  s.threads_created += s.incall_threads;
  s.tasks_created = rt.tasks_created.get();
  s.spare_starts_refused = rt.spare_starts_refused.get();
  s.os_threads = rt.os_threads.load(std::memory_order_relaxed);
  s.biased_locks = rt.bias_locks;
  s.lock_revocations = detail::lock_revocations();
  s.live_threads = s.threads_created - s.threads_finished;
  sample_peaks();
  s.peak_live_threads = rt.peak_live.load();
  s.peak_stacks_in_use = rt.peak_stacks.load();
  s.peak_stack_bytes = s.peak_stacks_in_use * rt.arena.size();
  s.stack_mappings = rt.arena.mappings();
  s.guarded_stacks = rt.arena.guarded();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  s.peak_rss_bytes = static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
  return s;
}

}  // namespace capstan::rts

namespace capstan {

runtime_statistics statistics() {
  if (rts::my_task() && rts::process.running.load()) {
    auto s = rts::snapshot_statistics();
    detail::safe_point();
    return s;
  }
  std::lock_guard<std::mutex> g(rts::process.last_stats_mu);
  if (rts::process.running.load())
    throw usage_error("capstan::statistics: called from an OS thread that is not running a "
                      "green thread while a runtime runs; call it from inside capstan::run, "
                      "or after run() returns for the final counters");
  return rts::process.last_stats;
}

}  // namespace capstan
