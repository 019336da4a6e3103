// runtime.hpp - the process-wide runtime state between run()'s start and end.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "capability/capability.hpp"
#include "mvar/event.hpp"
#include "capstan/options.hpp"
#include "capstan/statistics.hpp"
#include "storage/stack.hpp"
#include "task/task.hpp"

namespace capstan::rts {

struct Runtime {
  options opts;                                  // read-only while running
  std::vector<Capability*> caps;                 // read-only while running
  unsigned n_caps = 0;
  bool switch_every_safe_point = false;          // +RTS -C0

  std::atomic<bool> running{false};              // between start and teardown
  std::atomic<bool> shutting_down{false};        // Note [Shutdown]
  std::atomic<bool> stop{false};                 // schedulers exit
  std::atomic<bool> waits_need_lock{false};      // Note [Killing a blocked thread]
  bool membarrier_ok = false;                    // process registered for membarrier
  std::atomic<unsigned> n_idle{0};               // capabilities in idle()
  std::atomic<std::uint32_t> ticker_parked{0};   // Note [Stopping the ticker]
  std::atomic<std::uint64_t> id_blocks{0};       // next block of thread ids
  std::atomic<std::uint64_t> peak_live{0};
  std::atomic<std::uint64_t> peak_stacks{0};

  StackArena arena;
  ThreadDepot depot;
  bool sanitizers = false;                       // ASan or TSan fiber hooks present
  // Every Task of this run; freed when run() ends (a stale running_task
  // pointer may still be unparked, so a Task is never freed earlier).
  std::mutex tasks_mu;
  std::vector<std::unique_ptr<Task>> tasks;      // [tasks_mu]
  std::vector<Task*> retired_tasks;              // [tasks_mu] OS thread gone, reusable
  std::atomic<std::uint32_t> os_threads{0};      // runtime-made OS threads still running (futex word)
  std::atomic<std::uint32_t> incalls{0};         // call_in calls in progress (futex word)
  std::atomic<bool> accepting_incalls{false};    // call_in allowed: Note [In-calls]
  std::atomic<std::uint64_t> tasks_created{0};
  std::atomic<std::uint64_t> incall_threads_created{0};  // not counted by any capability
  std::atomic<std::uint32_t> next_bound_cap{0};  // fork_os round robin
  std::uint64_t epoch = 0;                       // run number, for foreign Tasks' TLS
  Signal* shutdown_events = nullptr;             // Note [Shutdown]
  std::chrono::steady_clock::time_point started;

  std::mutex last_stats_mu;                      // guards last_stats
  runtime_statistics last_stats;                 // of the last finished run
};

extern Runtime rt;

// Sum of a per-capability counter.
template <class F>
std::uint64_t sum_caps(F f) {
  std::uint64_t s = 0;
  for (Capability* c : rt.caps) s += f(*c);
  return s;
}

std::uint64_t live_threads();
void sample_peaks();
runtime_statistics snapshot_statistics();

// Thread ids are handed out to capabilities in blocks, so forking does not
// touch a shared counter.
inline constexpr std::uint64_t kIdBlock = 1024;

}  // namespace capstan::rts
