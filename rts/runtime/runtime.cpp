// runtime.cpp - a run of capstan::run from start to end: the Runtime
// object's life cycle (Note [The runtime's life cycle] in runtime.hpp),
// run_main, and what happens when the program exits inside run().
//
// Policy: run_main either starts everything a run needs - the Runtime,
// one Task per capability (capability 0's is the calling OS thread, which
// runs main), their OS threads, the ticker - or, if any step throws, undoes
// every step already taken and rethrows: no capability, Task, OS thread or
// "running" flag outlives a failed start, and the next run() starts afresh.
// The IO manager is not part of start-up: the first fd or timer wait starts
// it (io_start), and run_main stops it at the end (io_shutdown).
//
// Rejected: a Runtime allocated with new per run (every hot-path read of a
// flag would load the pointer first); resetting a static Runtime field by
// field (each new field had to be remembered in the reset, and the ticker
// and IO manager had life cycles of their own).
//
// Note [Exit inside run]
// ~~~~~~~~~~~~~~~~~~~~~~
// A green thread (or any thread) may call std::exit while run() runs.  C++
// then runs the at-exit handlers and static destructors on the calling
// thread while every other thread keeps running.  So:
//  * the Runtime lives in storage no static destructor touches
//    (RuntimeSlot), and the ticker is a member of it; so does the IO
//    manager (io_slot in io/io_manager.cpp): the runtime's OS threads
//    (workers, spares, the ticker, the IO thread and its closing threads)
//    keep running on live objects until the process ends, and no
//    std::thread is destroyed joinable.  Green threads on other
//    capabilities go on too, sleeping, waiting on fds and closing sockets
//    through the IO manager.  (It used to be stopped by an at-exit
//    handler: a green thread's next sleep then reached it after its last
//    drain, an abort, and a dropped lingering socket started it again, to
//    be destroyed joinable, std::terminate: ExitInsideRun.* in
//    tests/rts/runtime/exit_test.cpp);
//  * green threads are neither resumed nor unwound - their destructors do
//    not run, as for any thread at std::exit - and run() does not return;
//    the process exits with the status given to std::exit.
// A program that must clean up returns from run()'s main function instead.
#include "runtime/runtime.hpp"

#include <sched.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "capstan/errors.hpp"
#include "io/io_manager.hpp"
#include "primitives/say.hpp"
#include "mvar/biased_locks.hpp"
#include "mvar/event.hpp"
#include "primitives/clock.hpp"
#include "primitives/parker.hpp"
#include "primitives/sanitizer.hpp"
#include "schedule/schedule.hpp"
#include "shutdown/shutdown.hpp"
#include "sparks/pool.hpp"
#include "stats/stats.hpp"
#include "storage/unmapper.hpp"
#include "task/overflow_handler.hpp"
#include "trace/writer.hpp"

namespace capstan::rts {

ProcessState process;
RuntimeSlot runtime_slot;

// Pulls the gdb commands and the types they read into every program that
// links capstan statically: Note [Keeping the gdb support linked] in
// gdb/gdb_support.cpp.
extern "C" [[gnu::visibility("hidden")]] const char capstan_gdb_support_anchor;
[[gnu::used]] static const char* const keep_gdb_support = &capstan_gdb_support_anchor;

Runtime::Runtime(const options& o)
    : opts(o),
      n_caps(o.capabilities),
      switch_every_safe_point(o.timeslice.count() == 0),
      sanitizers(san::asan() || san::tsan()),
      scheduler_loop(&schedule),
      started(std::chrono::steady_clock::now()) {
  // Note [Killing a blocked thread]: without membarrier the wait lock is
  // always taken.
  membarrier_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  waits_need_lock.store(!membarrier_ok);
  // Note [Biased locks]: one capability, a fence for revokers, and no
  // ThreadSanitizer (which cannot see that fence).
  bias_locks = n_caps == 1 && membarrier_ok && !san::tsan();
  detail::start_bias_epoch();
  coarse_now_ns.store(now_ns(), std::memory_order_relaxed);
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) n_cpus = std::max(1, CPU_COUNT(&cpus));
  arena.configure(o.stack_size);
  caps.reserve(n_caps);
  arena.prime(n_caps);  // last: nothing after it can throw (Note [Running out of stacks])
}

Runtime::~Runtime() {
  for (Capability* c : caps) {
    if (c->sparks.slots) spark_pool_release(c);
    delete c;
  }
  depot.release_all();
  arena.release_all();
}

namespace {

void validate(const options& o) {
  if (o.capabilities < 1 || o.capabilities > 256)
    throw usage_error(fmt::format(
        "capstan::run: options.capabilities = {} is impossible; accepted: 1..256",
        o.capabilities));
  if (o.stack_size < 16 * 1024 || o.stack_size > (std::size_t{1} << 30))
    throw usage_error(fmt::format(
        "capstan::run: options.stack_size = {} bytes is impossible; accepted: 16 KiB .. 1 GiB",
        o.stack_size));
  if (o.spark_pool_size < 1 || o.spark_pool_size > (std::size_t{1} << 24))
    throw usage_error(fmt::format(
        "capstan::run: options.spark_pool_size = {} is impossible; accepted: 1 .. 16777216",
        o.spark_pool_size));
  // The rest as their +RTS flags bound them (lib/options.cpp).
  if (o.timeslice.count() < 0 || o.timeslice > std::chrono::hours(1))
    throw usage_error(fmt::format(
        "capstan::run: options.timeslice = {} us is impossible; accepted: 0 .. 3600 s (0 = switch "
        "at every safe point)", o.timeslice.count()));
  if (o.stack_pool_watermark > (std::size_t{1} << 24))
    throw usage_error(fmt::format(
        "capstan::run: options.stack_pool_watermark = {} is impossible; accepted: 0 .. 16777216",
        o.stack_pool_watermark));
  if (o.max_spare_tasks > 1024)
    throw usage_error(fmt::format(
        "capstan::run: options.max_spare_tasks = {} is impossible; accepted: 0 .. 1024",
        o.max_spare_tasks));
  if (o.warn_hog.count() < 0 || o.warn_hog > std::chrono::hours(1))
    throw usage_error(fmt::format(
        "capstan::run: options.warn_hog = {} ms is impossible; accepted: 0 .. 3600000 (0 = never)",
        o.warn_hog.count()));
  if (o.deadlock_detection != options::deadlock::off &&
      o.deadlock_detection != options::deadlock::on &&
      o.deadlock_detection != options::deadlock::force)
    throw usage_error(fmt::format(
        "capstan::run: options.deadlock_detection = {} is impossible; accepted: off, on, force",
        static_cast<unsigned>(o.deadlock_detection)));
}

struct MainClosure {
  void (*fn)(void*);
  void* ctx;
};

bool main_invoke(void* p) {
  auto* c = static_cast<MainClosure*>(p);
  if (rt.opts.dump_on_sigquit) {
    // The IO manager's loop turns SIGQUIT into a thread dump; without it
    // the program still runs, and says so.
    try {
      io_start();
    } catch (const std::exception& e) {
      say("capstan: +RTS --dump-on-sigquit: {}; SIGQUIT will not dump threads\n",
                 e.what());
    }
  }
  c->fn(c->ctx);  // run<>'s wrapper: catches everything main throws
  shutdown_protocol();
  return true;
}
void main_destroy(void*) noexcept {}
constexpr detail::closure_ops kMainOps{&main_invoke, &main_destroy};

// wait_for_os_threads returns once every runtime-made OS thread has left
// (each decrements rt.os_threads last, then wakes us).
void wait_for_os_threads() {
  for (std::uint32_t n; (n = rt.os_threads.load(std::memory_order_acquire)) != 0;)
    futex_wait(&rt.os_threads, n);
}

// abandon_start undoes a start-up that threw: the schedulers already
// started are stopped (they have run nothing: main is not running, and no
// other thread exists) and waited for; the ticker is stopped if it started.
void abandon_start(Task* task0) noexcept {
  rt.stop.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> g(rt.tasks_mu);
    for (auto& t : rt.tasks) t->parker.unpark();
  }
  wait_for_os_threads();
  rt.ticker.stop();
  if (task0) {
    leave_signal_stack(task0);
    set_my_task(nullptr);
  }
  reclaim_leftovers();
  trace_stop();
}

}  // namespace

}  // namespace capstan::rts

namespace capstan::detail {

using namespace capstan::rts;

void run_main(const void* opts_ptr, void (*fn)(void*), void* ctx) {
  const options& o = *static_cast<const options*>(opts_ptr);
  validate(o);
  if (my_task())
    throw usage_error("capstan::run: called from inside a running runtime; nested runtimes "
                      "are not supported");
  bool expected = false;
  if (!process.running.compare_exchange_strong(expected, true))
    throw usage_error("capstan::run: a runtime is already running in this process (one at a "
                      "time; start the next after run() returns)");
  // From here every exit path - a failed start included - ends with the
  // Runtime destroyed, then the flag cleared.
  struct EndOfRun {
    bool constructed = false;
    ~EndOfRun() {
      if (constructed) {
        process.ids_used = rt.id_blocks.load(std::memory_order_relaxed);  // Note [Thread ids]
        std::destroy_at(&runtime_slot.rt);
      }
      process.running.store(false, std::memory_order_release);
    }
  } end_of_run;
  unmapper::wait();  // the last run's stacks are back first: Note [Unmapping after the run]
  std::construct_at(&runtime_slot.rt, o);
  end_of_run.constructed = true;
  rt.main_tid = static_cast<long>(::syscall(SYS_gettid));
  ++process.epoch;
  rt.first_id = process.ids_used;  // Note [Thread ids] in thread/threads.cpp
  rt.id_blocks.store(process.ids_used, std::memory_order_relaxed);
  process.awaiting_incalls.store(false);

  Event shutdown_events;
  Task* task0 = nullptr;
  try {
    std::vector<Task*> initial;
    for (unsigned i = 0; i < rt.n_caps; ++i) {
      auto c = std::make_unique<Capability>();
      c->no = i;
      c->stacks.attach(&rt.arena, o.stack_pool_watermark, &c->runtime_loop);
      c->threads.attach(&rt.depot);
      c->all_lock.bias(rt.bias_locks);  // Note [Home lists]
      rt.caps.push_back(c.get());  // reserved: cannot throw
      Capability* cap = c.release();
      spark_pool_init(cap, o.spark_pool_size);
      Task* task = new_task(i == 0 ? TaskKind::main : TaskKind::worker);
      task->cap = cap;
      task->last_cap = cap;
      cap->running_task.store(task);
      initial.push_back(task);
    }
    rt.shutdown_events = &shutdown_events;

    // Capability 0 is run by the calling OS thread, so main is bound to it.
    task0 = initial[0];
    bind_task_to_this_os_thread(task0);
    if (!rt.sanitizers) {  // the sanitizers have their own SIGSEGV reporting
      install_overflow_handler();
      enter_signal_stack(task0);
    }
    init_task_sanitizer_state(task0);
    MainClosure mc{fn, ctx};
    Thread* main_thread = create_system_thread(rt.caps[0], &kMainOps, &mc, sizeof mc,
                                               /*bound=*/true, /*locked=*/true);
    main_thread->bound_task = task0;
    task0->bound_thread = main_thread;

    trace_start();  // +RTS -l: before any other OS thread (rt.tracing is [start])
    // Note [Switch hooks] (schedule/switch.hpp): before the first switch.
    rt.switch_hooks = rt.tracing || rt.sanitizers || rt.switch_every_safe_point;
    // Note [Starting on another CPU] (task/task.cpp)
    for (unsigned i = 1; i < rt.n_caps; ++i)
      start_os_thread(initial[i], rt.scheduler_loop, /*elsewhere=*/true);
    rt.ticker.start(o.timeslice);
  } catch (...) {
    abandon_start(task0);
    throw;
  }
  process.accepting_incalls.store(true, std::memory_order_seq_cst);

  schedule(task0);  // returns when main has shut everything down

  // Every runtime-made OS thread, and every foreign thread inside call_in,
  // leaves before the Tasks and capabilities are freed.  Note [In-calls].
  wait_for_os_threads();
  process.awaiting_incalls.store(true, std::memory_order_seq_cst);
  for (std::uint32_t n; (n = process.incalls.load(std::memory_order_seq_cst)) != 0;)
    futex_wait(&process.incalls, n);
  // Note [Waking from outside] in schedule/block.cpp: a few instructions.
  while (process.outside_wakers.load(std::memory_order_seq_cst) != 0) sched_yield();
  rt.ticker.stop();
  leave_signal_stack(task0);
  set_my_task(nullptr);
  rt.shutdown_events = nullptr;
  io_shutdown();  // the IO thread wakes nobody from here on
  trace_stop();   // every thread that records has gone: complete the file
  auto abandoned = reclaim_leftovers();
  for (Capability* c : rt.caps) spark_pool_release(c);  // leftovers count as GC'd
  auto final_stats = snapshot_statistics();
  final_stats.threads_abandoned = abandoned;
  // Given back to a maker that never forced or dropped it: abandoned with
  // its maker (give_back in sparks/sparks.cpp).
  if (auto left = rt.sparks_given_back_unsettled.load(std::memory_order_relaxed); left > 0)
    final_stats.sparks.gcd += static_cast<std::uint64_t>(left);
  {
    std::lock_guard<std::mutex> g(process.last_stats_mu);
    process.last_stats = final_stats;
  }
  bool print = o.stats;
  // end_of_run destroys the Runtime and clears the flag.
  if (print) std::fputs(final_stats.summary().c_str(), stderr);
}

}  // namespace capstan::detail
