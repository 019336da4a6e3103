// runtime.hpp - the Runtime object: all state of one run of capstan::run.
//
// Note [The runtime's life cycle]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Everything a run needs lives in one Runtime object, `rt`: constructed by
// run_main when run() starts (Runtime::Runtime), destroyed when it returns
// (Runtime::~Runtime), and so fresh for every run - no field is reset by
// hand.  The ticker is a member; the IO manager is started lazily by the
// first fd or timer wait and stopped by run_main before the Runtime goes
// (io_shutdown).  Only what must outlive a run, or be read when no run
// exists, lives outside it, in `process` (ProcessState): the "a runtime is
// running" flag, the run number, the in-call gate (call_in may be called
// from any OS thread at any time) and the last run's statistics.
//
// `rt` is a reference to storage that is never destroyed by static
// destructors: a program that calls std::exit inside run() (Note [Exit
// inside run] in runtime/runtime.cpp) leaves the runtime's OS threads
// running on live objects until the process ends.  The reference is bound
// at compile time, so `rt.x` costs what a plain global's field does.
//
// Every field states who may write it:
//   [start]  written before run_main starts any other OS thread; read-only after;
//   [atomic] anyone, with the orderings stated at the use;
//   [lock:X] under lock X;  [owner] as in capability.hpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "capability/capability.hpp"
#include "capstan/options.hpp"
#include "capstan/statistics.hpp"
#include "primitives/counter.hpp"
#include "runtime/ticker.hpp"
#include "storage/stack.hpp"
#include "storage/thread_slabs.hpp"
#include "task/task.hpp"
#include "thread/fates.hpp"

namespace capstan::rts {

class Event;
class TraceBuffer;

struct Runtime {
  explicit Runtime(const options& o);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  options opts;                                  // [start]
  std::vector<Capability*> caps;                 // [start] owned: freed by ~Runtime
  unsigned n_caps = 0;                           // [start]
  unsigned n_cpus = 1;                           // [start] CPUs this process may run on (its
                                                 // affinity mask): Note [Spinning only on a
                                                 // free CPU] in schedule/idle.cpp
  bool switch_every_safe_point = false;          // [start] +RTS -C0
  bool membarrier_ok = false;                    // [start] process registered for membarrier
  bool sanitizers = false;                       // [start] ASan or TSan fiber hooks present
  // [start] tracing || sanitizers || switch_every_safe_point: Note [Switch hooks]
  // (schedule/switch.hpp); true until run_main has decided.
  bool switch_hooks = true;
  bool bias_locks = false;                       // [start] Note [Biased locks] (capstan/detail/mvar_core.hpp)
  // [start] the scheduler loop a new worker Task runs (schedule/schedule.hpp):
  // set by run_main, so that task/ starts workers without calling up into schedule/.
  void (*scheduler_loop)(Task*) = nullptr;

  std::atomic<bool> shutting_down{false};        // [atomic] Note [Shutdown]
  std::atomic<bool> stop{false};                 // [atomic] schedulers exit
  // [atomic] shutdown's grace period is over and it waits only for safe
  // calls: a thread it could not kill is abandoned at its next checkpoint
  // (Note [Shutdown and uninterruptible_mask] in schedule/yield.cpp).
  std::atomic<bool> grace_over{false};
  std::atomic<bool> waits_need_lock{false};      // [atomic] Note [Wait locks] in schedule/raise.cpp
  std::atomic<bool> wait_locks_on{false};        // [atomic] the protocol of Note [Wait locks] is done
  // [atomic] the capabilities in idle() (low 32 bits) and the number of
  // times one has left idle() (high 32 bits, kIdleExit each), in one word
  // so that the ticker can tell that none has left since it looked (Note
  // [Stopping the ticker] in runtime/ticker.cpp).  Read the count with
  // n_idle().
  std::atomic<std::uint64_t> idle_word{0};
  static constexpr std::uint64_t kIdleExit = std::uint64_t{1} << 32;
  static unsigned idle_count(std::uint64_t word) noexcept { return static_cast<std::uint32_t>(word); }
  unsigned n_idle(std::memory_order mo) const noexcept { return idle_count(idle_word.load(mo)); }
  std::atomic<unsigned> n_spinning{0};           // [atomic, relaxed] those of them spinning,
                                                 // not asleep: Note [Spinning only on a free CPU]
  std::atomic<std::int64_t> last_watch_wake_ns{0};  // [atomic, relaxed] Note [Stealing from a
                                                    // stalled capability]: rate limit
  std::atomic<std::int64_t> watch_request_ns{0};    // [atomic, relaxed] same Note: when a busy
                                                    // capability last asked to be watched
  std::atomic<std::uint32_t> ticker_parked{0};   // [atomic] Note [Stopping the ticker]
  std::atomic<std::uint64_t> id_blocks{0};       // [atomic] next block of thread ids
  // [atomic, relaxed] a Task has taken a block of ids for in-call threads
  // (Note [Thread ids]): until then check_thread_id need not look at Tasks.
  std::atomic<bool> task_id_blocks{false};
  std::uint64_t first_id = 0;                    // [start] this run's ids are above it (Note [Thread ids])
  std::atomic<std::uint64_t> peak_live{0};       // [atomic] stats/stats.cpp
  std::atomic<std::uint64_t> peak_stacks{0};     // [atomic]

  StackArena arena;                              // internally synchronised (stack.hpp)
  ThreadDepot depot;                             // internally synchronised (thread_slabs.hpp)
  // Every Task of this run; freed with the Runtime (a stale running_task
  // pointer may still be unparked, so a Task is never freed earlier).
  std::mutex tasks_mu;
  std::vector<std::unique_ptr<Task>> tasks;      // [lock:tasks_mu]
  std::vector<Task*> retired_tasks;              // [lock:tasks_mu] OS thread gone, reusable
  std::atomic<std::uint32_t> os_threads{0};      // [atomic] runtime-made OS threads still running (futex word)
  SharedCounter tasks_created;
  SharedCounter incall_threads_created;          // not counted by any capability
  SharedCounter incalls_queued;                  // in-calls that waited for a hand-over (foreign/in_call.cpp)
  // Note [No OS thread for a spare] in task/handover.cpp
  SharedCounter spare_starts_refused;
  std::atomic<bool> spare_refusal_reported{false};  // [atomic] stderr told once per run
  std::atomic<std::uint32_t> next_bound_cap{0};  // [atomic] fork_os / call_in round robin
  Fates fates;                                   // internally synchronised (thread/fates.hpp)
  long main_tid = 0;                             // [start] OS thread id of run()'s caller
  // Sparks given back to their makers (give_back in sparks/sparks.cpp) and
  // not yet forced or dropped; what is left at the end counts GC'd (its
  // maker was abandoned).  [atomic, relaxed: a count read after every
  // OS thread has left]
  std::atomic<std::int64_t> sparks_given_back_unsettled{0};
  SharedCounter deadlocks_detected;              // exception/deadlock.cpp
  SharedCounter deadlock_stood_down;
  Event* shutdown_events = nullptr;              // [owner: the main thread] Note [Shutdown]
  // Set by the ticker when, during shutdown, nothing could wake a thread
  // any more (shutdown_tick); main clears it.  Note [Blocked while unwinding].
  std::atomic<bool> shutdown_stuck{false};       // [atomic]
  std::chrono::steady_clock::time_point started;  // [start]
  // A clock read without a system call: now_ns() as of the ticker's last
  // tick (written every tick and when it wakes; relaxed: a diagnostic clock
  // for Thread::last_ran_ns, accurate to a tick).
  std::atomic<std::int64_t> coarse_now_ns{0};    // [atomic]
  // The event trace (+RTS -l): see trace/trace.hpp.  The buffers are made
  // by trace_start before any other OS thread, freed by trace_stop after
  // all have gone.
  bool tracing = false;                          // [start]
  TraceBuffer* trace_io = nullptr;               // [start] the IO manager thread's buffer
  TraceBuffer* trace_misc = nullptr;             // [start] shared: under trace_misc_mu
  std::mutex trace_misc_mu;
  Ticker ticker;                                 // started and stopped by run_main
};

// State that outlives a run (see the Note).
struct ProcessState {
  std::atomic<bool> running{false};              // [atomic] a Runtime exists (between run_main's start and end)
  std::atomic<std::uint32_t> incalls{0};         // [atomic] call_in calls in progress (futex word)
  std::atomic<bool> accepting_incalls{false};    // [atomic] call_in allowed: Note [In-calls]
  std::atomic<bool> awaiting_incalls{false};     // [atomic] run_main waits for incalls to reach 0
  std::atomic<std::uint32_t> outside_wakers{0};  // [atomic] OS threads without a Task inside wake():
                                                 // Note [Waking from outside] in schedule/block.cpp
  std::uint64_t epoch = 0;                       // [start] run number, for foreign Tasks' TLS
  std::uint64_t ids_used = 0;                    // [start/end of a run] thread ids earlier runs
                                                 // handed out: Note [Thread ids] in thread/threads.cpp
  std::mutex last_stats_mu;
  runtime_statistics last_stats;                 // [lock:last_stats_mu] of the last finished run
};
extern ProcessState process;

// Storage for `rt`: never destroyed by static destructors (see the Note).
union RuntimeSlot {
  constexpr RuntimeSlot() : none{} {}
  ~RuntimeSlot() {}
  char none;
  Runtime rt;
};
extern RuntimeSlot runtime_slot;
// The Runtime of the run in progress; valid only while process.running
// (and on the runtime's own threads, which exist only then).
constinit inline Runtime& rt = runtime_slot.rt;

}  // namespace capstan::rts
