// runtime.cpp - starting the runtime, shutting it down, and its statistics.
//
// Note [Shutdown]
// ~~~~~~~~~~~~~~~
// When run()'s main function returns, the main green thread (still running,
// bound to capability 0) reclaims every other thread before anything stops:
//  1. shutting_down = true, and every capability is interrupted, so a
//     running thread throws thread_killed from its next runtime call or
//     safe point, and a thread that has not started never runs its body.
//  2. Every blocked thread is woken with thread_killed
//     (Note [Killing a blocked thread]); its stack unwinds and its
//     destructors run - nothing a thread owns is leaked.
//  3. The main thread waits on rt.shutdown_events, which each finishing
//     thread (and each tick, as a clock) pokes, and repeats 2 until only it
//     is left.  A thread that swallows thread_killed and blocks again is
//     killed again; one that has not finished after kShutdownGrace is
//     abandoned - its stack is freed without unwinding - and reported on
//     stderr by id and label.  Every thread's fate is counted in the
//     statistics: finished, killed, or abandoned.
//  4. stop = true; every capability's scheduler returns; run() joins the
//     worker Tasks and the ticker, frees stacks and capabilities, and
//     returns main's result.
// GHC kills threads at exit without running their handlers; C++ has no
// other way to run destructors than unwinding, hence thread_killed.
#include "runtime/runtime.hpp"

#include <linux/membarrier.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "capstan/errors.hpp"
#include "capstan/thread.hpp"
#include "io/io_manager.hpp"
#include "primitives/sanitizer.hpp"
#include "schedule/schedule.hpp"
#include "sparks/sparks.hpp"
#include "task/handover.hpp"
#include "task/overflow_handler.hpp"
#include "runtime/ticker.hpp"

namespace capstan::rts {

Runtime rt;

namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(1);

void update_max(std::atomic<std::uint64_t>& peak, std::uint64_t v) {
  std::uint64_t p = peak.load(std::memory_order_relaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, std::memory_order_relaxed)) {
  }
}

// kill_sweep asks every blocked thread to die; true if all requests landed.
bool kill_sweep() {
  bool all = true;
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->is_main) continue;
      if (!request_kill(t)) all = false;
    }
    c->all_lock.unlock();
  }
  return all;
}

// in_safe_call: is t inside a safe call (its Task runs foreign code on its stack)?
bool in_safe_call(Thread* t) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (auto& task : rt.tasks)
    if (task->in_safe_call.load(std::memory_order_relaxed) == t) return true;
  return false;
}

// Threads still inside safe calls, for the shutdown report.
std::uint64_t safe_calls_in_progress(std::string* names) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  std::uint64_t n = 0;
  for (auto& task : rt.tasks) {
    Thread* t = task->in_safe_call.load(std::memory_order_relaxed);
    if (!t) continue;
    if (++n <= 10 && names) *names += fmt::format(" {}", t->id);
  }
  return n;
}

void report_abandoned() {
  std::string names;
  std::uint64_t n = 0;
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->is_main || in_safe_call(t)) continue;
      ++n;
      if (n <= 10)
        names += fmt::format(" {}({})", t->id, t->label ? t->label->c_str() : "unlabelled");
    }
    c->all_lock.unlock();
  }
  if (n)
    std::fprintf(stderr,
                 "capstan: %llu thread(s) did not finish within %llds of shutdown (they caught "
                 "thread_killed and carried on); abandoned without unwinding:%s%s\n",
                 static_cast<unsigned long long>(n),
                 static_cast<long long>(kShutdownGrace.count()), names.c_str(),
                 n > 10 ? " ..." : "");
}

// Turns on Thread::wait_lock for every blocker and waker, and waits until
// nobody can still be skipping it.  Note [Killing a blocked thread].
void require_wait_locks() {
  rt.waits_need_lock.store(true, std::memory_order_seq_cst);
  if (!rt.membarrier_ok) return;  // the lock was never skipped
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  std::vector<std::uint64_t> seen;
  for (Capability* c : rt.caps) seen.push_back(c->sched_epoch.load(std::memory_order_acquire));
  for (std::size_t i = 1; i < rt.caps.size(); ++i) {  // capability 0 is us
    Capability* c = rt.caps[i];
    // A free capability runs nothing (a capless Task always takes the lock).
    while (c->sched_epoch.load(std::memory_order_acquire) == seen[i] &&
           !c->idle.load(std::memory_order_acquire) &&
           c->hold.load(std::memory_order_acquire) != Hold::free) {
      interrupt_capability(c);
      capstan::yield();
    }
  }
}

void shutdown_protocol() {
  rt.accepting_incalls.store(false, std::memory_order_seq_cst);  // Note [In-calls]
  rt.shutting_down.store(true, std::memory_order_seq_cst);
  require_wait_locks();
  sample_peaks();
  for (Capability* c : rt.caps) {
    interrupt_capability(c);
    notify_capability(c);
  }
  auto deadline = std::chrono::steady_clock::now() + kShutdownGrace;
  bool reported_calls = false;
  for (;;) {
    kill_sweep();
    if (live_threads() <= 1 && rt.incalls.load(std::memory_order_seq_cst) == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      // Threads inside safe calls run foreign code on their own stacks: run()
      // waits for the calls to return (each thread then meets thread_killed
      // and unwinds).  Everyone else is abandoned.  Note [Shutdown].
      std::string names;
      std::uint64_t calls = safe_calls_in_progress(&names);
      if (calls == 0) {
        report_abandoned();
        break;
      }
      if (!reported_calls) {
        std::fprintf(stderr,
                     "capstan: shutdown is waiting for %llu thread(s) inside safe_call to "
                     "return:%s%s\n",
                     static_cast<unsigned long long>(calls), names.c_str(),
                     calls > 10 ? " ..." : "");
        reported_calls = true;
      }
    }
    rt.shutdown_events->wait();  // a thread finished, or a tick passed
  }
  rt.stop.store(true, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (auto& t : rt.tasks) t->parker.unpark();
}

struct MainClosure {
  void (*fn)(void*);
  void* ctx;
};

void main_invoke(void* p) {
  auto* c = static_cast<MainClosure*>(p);
  c->fn(c->ctx);  // run<>'s wrapper: catches everything main throws
  shutdown_protocol();
}
void main_destroy(void*) noexcept {}
constexpr detail::closure_ops kMainOps{&main_invoke, &main_destroy};

// Frees the threads left after shutdown (abandoned) and the free lists;
// returns how many threads were abandoned.
std::uint64_t reclaim_leftovers() {
  std::uint64_t abandoned = 0;
  for (Capability* c : rt.caps) {
    Thread* t = c->all_head;
    while (t) {
      Thread* next = t->all_next;
      if (!t->is_main) ++abandoned;
      if (t->blocked_on) {  // take it out of the mvar's queue for good
        t->blocked_on->lock();
        t->blocked_on->remove(*t->waiter);
        t->blocked_on->unlock();
      }
      if (t->ops) t->ops->destroy(t->closure);
      if (t->tsan_fiber) __tsan_destroy_fiber(t->tsan_fiber);
      if (t->closure && t->closure != t->inline_closure)
        ::operator delete(t->closure, std::align_val_t(t->closure_align));
      delete t->label;
      t = next;
    }
    c->all_head = nullptr;
  }
  rt.depot.release_all();  // every Thread object lives in its slabs
  return abandoned;
}

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
  if (o.timeslice.count() < 0)
    throw usage_error("capstan::run: options.timeslice is negative; accepted: >= 0");
}

}  // namespace

std::uint64_t live_threads() {
  std::uint64_t created = sum_caps([](Capability& c) { return c.threads_created.get(); }) +
                          rt.incall_threads_created.load(std::memory_order_relaxed);
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
    s.uncaught_exceptions += c->uncaught_exceptions.get();
    s.blocked_indefinitely += c->threads_blocked_indefinitely.get();
    s.stacks_in_use += c->stacks_allocated.get() - c->stacks_freed.get();
  }
  s.incall_threads = rt.incall_threads_created.load(std::memory_order_relaxed);
  s.threads_created += s.incall_threads;
  s.tasks_created = rt.tasks_created.load(std::memory_order_relaxed);
  s.os_threads = rt.os_threads.load(std::memory_order_relaxed);
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

namespace capstan::detail {

using namespace capstan::rts;

void run_main(const void* opts_ptr, void (*fn)(void*), void* ctx) {
  const options& o = *static_cast<const options*>(opts_ptr);
  validate(o);
  if (my_task())
    throw usage_error("capstan::run: called from inside a running runtime; nested runtimes "
                      "are not supported");
  bool expected = false;
  if (!rt.running.compare_exchange_strong(expected, true))
    throw usage_error("capstan::run: a runtime is already running in this process (one at a "
                      "time; start the next after run() returns)");

  rt.opts = o;
  rt.n_caps = o.capabilities;
  rt.switch_every_safe_point = o.timeslice.count() == 0;
  rt.shutting_down.store(false);
  rt.stop.store(false);
  // Note [Killing a blocked thread]: without membarrier the wait lock is
  // always taken.
  rt.membarrier_ok =
      syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  rt.waits_need_lock.store(!rt.membarrier_ok);
  rt.n_idle.store(0);
  rt.ticker_parked.store(0);
  rt.id_blocks.store(0);
  rt.peak_live.store(0);
  rt.peak_stacks.store(0);
  rt.started = std::chrono::steady_clock::now();
  rt.sanitizers = san::asan() || san::tsan();
  rt.arena.configure(o.stack_size);
  rt.caps.clear();
  rt.tasks.clear();
  rt.retired_tasks.clear();
  rt.os_threads.store(0);
  rt.incalls.store(0);
  rt.tasks_created.store(0);
  rt.incall_threads_created.store(0);
  rt.next_bound_cap.store(0);
  ++rt.epoch;
  std::vector<Task*> initial;
  for (unsigned i = 0; i < rt.n_caps; ++i) {
    auto* c = new Capability;
    c->no = i;
    c->stacks.attach(&rt.arena, o.stack_pool_watermark);
    c->threads.attach(&rt.depot);
    spark_pool_init(c, o.spark_pool_size);
    rt.caps.push_back(c);
    Task* task = new_task(i == 0 ? TaskKind::main : TaskKind::worker);
    task->cap = c;
    task->last_cap = c;
    c->running_task.store(task);
    initial.push_back(task);
  }
  Signal shutdown_events;
  rt.shutdown_events = &shutdown_events;

  // Capability 0 is run by the calling OS thread, so main is bound to it.
  Task* task0 = initial[0];
  bind_task_to_this_os_thread(task0);
  if (!rt.sanitizers) {  // the sanitizers have their own SIGSEGV reporting
    install_overflow_handler();
    enter_signal_stack(task0);
  }
  init_task_sanitizer_state(task0);
  MainClosure mc{fn, ctx};
  Thread* main_thread =
      create_system_thread(rt.caps[0], &kMainOps, &mc, sizeof mc, /*bound=*/true, /*locked=*/true);
  main_thread->bound_task = task0;
  task0->bound_thread = main_thread;

  for (unsigned i = 1; i < rt.n_caps; ++i) start_os_thread(initial[i], &schedule);
  ticker.start(o.timeslice);
  rt.accepting_incalls.store(true, std::memory_order_seq_cst);

  schedule(task0);  // returns when main has shut everything down

  // Every runtime-made OS thread, and every foreign thread inside call_in,
  // leaves before the Tasks and capabilities are freed.
  for (std::uint32_t n; (n = rt.os_threads.load(std::memory_order_acquire)) != 0;)
    futex_wait(&rt.os_threads, n);
  for (std::uint32_t n; (n = rt.incalls.load(std::memory_order_seq_cst)) != 0;)
    futex_wait(&rt.incalls, n);
  ticker.stop();
  leave_signal_stack(task0);
  set_my_task(nullptr);
  rt.shutdown_events = nullptr;
  io_shutdown();  // the IO thread wakes nobody from here on
  auto abandoned = reclaim_leftovers();
  for (Capability* c : rt.caps) spark_pool_release(c);  // leftovers count as GC'd
  auto final_stats = snapshot_statistics();
  final_stats.threads_abandoned = abandoned;
  {
    std::lock_guard<std::mutex> g(rt.last_stats_mu);
    rt.last_stats = final_stats;
  }
  rt.arena.release_all();
  for (Capability* c : rt.caps) delete c;
  rt.caps.clear();
  rt.tasks.clear();
  rt.n_caps = 0;
  rt.running.store(false);
  if (o.stats) std::fputs(final_stats.summary().c_str(), stderr);
}

}  // namespace capstan::detail
