// task.cpp - Tasks: making them, their OS threads, and the OS-thread
// bookkeeping of the calling Task.  See task.hpp.
#include "task/task.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <system_error>

#include "capability/capability.hpp"
#include "primitives/fault_injection.hpp"
#include "primitives/sanitizer.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "runtime/runtime.hpp"
#include "task/handover.hpp"
#include "task/overflow_handler.hpp"

namespace __cxxabiv1 {
struct __cxa_eh_globals;
extern "C" __cxa_eh_globals* __cxa_get_globals() noexcept;
}  // namespace __cxxabiv1

namespace capstan::rts {

constinit thread_local Task* tl_task_slot = nullptr;

__attribute__((noinline)) Task* my_task() noexcept {
  // The empty asm keeps the compiler from treating this as a pure function
  // whose result could be reused across a switch.
  asm volatile("" ::: "memory");
  return tl_task_slot;
}

__attribute__((noinline)) void set_my_task(Task* t) noexcept {
  tl_task_slot = t;
  if (!t) {
    detail::tl_here = {};
  }
}

void bind_task_to_this_os_thread(Task* t) {
  set_my_task(t);
  detail::tl_here = t && t->cap ? here_of(t->cap) : detail::capability_here{};
  t->errno_loc = &errno;
  t->eh = reinterpret_cast<EhGlobals*>(__cxxabiv1::__cxa_get_globals());
  t->os_tid.store(static_cast<int>(::gettid()), std::memory_order_relaxed);
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo = nullptr;
    std::size_t size = 0;
    pthread_attr_getstack(&attr, &lo, &size);
    t->native_stack_lo = lo;
    t->native_stack_size = size;
    pthread_attr_destroy(&attr);
  }
}

void init_task_sanitizer_state(Task* t) {
  if (san::tsan()) t->tsan_fiber = __tsan_get_current_fiber();
}

void Task::reset_for_reuse() noexcept {
  // Everything a run of schedule() leaves behind.  Not touched: parker (a
  // stale running_task read may still unpark it: Note [Sticky wake-up]
  // makes that harmless), threads (its cached Thread objects stay), the
  // per-OS-thread caches (rebound by bind_task_to_this_os_thread).
  cap = nullptr;
  sched_sp = nullptr;
  post = PostSwitch{};
  given.store(false, std::memory_order_relaxed);
  given_cap = nullptr;
  given_thread = nullptr;
  last_cap = nullptr;
  next_spare = nullptr;
  bound_thread = nullptr;
  bound_done = false;
  give_cap_to_spare = false;
  creator_cpu.store(-1, std::memory_order_relaxed);
  start_cpu.store(-1, std::memory_order_relaxed);
}

Task* new_task(TaskKind kind) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  Task* t;
  if (!rt.retired_tasks.empty()) {
    t = rt.retired_tasks.back();
    rt.retired_tasks.pop_back();
    t->reset_for_reuse();
  } else {
    rt.tasks.push_back(std::make_unique<Task>());
    t = rt.tasks.back().get();
    t->no = static_cast<unsigned>(rt.tasks.size() - 1);
    t->threads.attach(&rt.depot);
  }
  t->kind = kind;
  rt.tasks_created.add();
  return t;
}

namespace {

void retire(Task* t) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  rt.retired_tasks.push_back(t);
}

}  // namespace

// Note [Starting on another CPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Linux queues a new thread near its creator, often on the creator's own
// CPU, and moves it only when a balancing pass notices.  run() starts the
// capabilities' OS threads from the thread that goes on to run main, so a
// worker could sit queued behind main for milliseconds while the other CPU
// ran something else: `perf sched timehist` of `sieve 2000000 +RTS -N2`
// (2 ms of work in 31 sparks) showed capability 1's thread runnable on
// main's CPU for 3.2 ms before it first ran, and in 8 of 20 runs in a row
// (9 and 10 of 40 in two later batches, 1 of 30 in a third) no spark was
// converted at all: the program ran at its -N1 speed.  So run() creates
// each worker with an affinity attribute that leaves out the creator's
// current CPU (glibc applies it to the new thread before any of our code
// runs there, moving it off that CPU), and the worker's first act is to
// restore the mask the creator had - the one it would have inherited - so
// that the kernel may move it later as it likes.  Should the restore fail
// (the snapshot no longer valid: CPUs taken away meanwhile) the worker
// asks for every CPU, which the kernel trims to what the process may use;
// it is never left on the narrower mask.  Should the narrowing itself be
// refused (a sandbox that forbids setting affinity), the thread is created
// as before, without it.  Not done when the mask holds one CPU, and not
// for spare or fork_os Tasks, which start while the runtime is running and
// its threads are spread already.  Rejected: pinning each capability to a
// CPU for good (GHC's -qa), which fights other processes for CPUs the
// kernel could balance.
namespace {

struct Start {
  Task* task;
  void (*body)(Task*);
  bool widen;         // restore `mask` first (it started on a narrower one)
  cpu_set_t mask;     // the creator's mask when the thread was made
};

void widen_affinity(const cpu_set_t& mask) {
  if (sched_setaffinity(0, sizeof mask, &mask) == 0) return;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof all, &all);
}

void run_os_thread(Start* st) {
  st->task->start_cpu.store(sched_getcpu(), std::memory_order_relaxed);
  if (st->widen) widen_affinity(st->mask);
  Task* task = st->task;
  void (*body)(Task*) = st->body;
  delete st;
  // Named, so deadlock detection can tell the runtime's OS threads from
  // the program's (Note [Deadlock detection] in exception/deadlock.cpp).
  pthread_setname_np(pthread_self(), "capstan-task");
  bind_task_to_this_os_thread(task);
  init_task_sanitizer_state(task);
  if (!rt.sanitizers) enter_signal_stack(task);
  body(task);
  if (!rt.sanitizers) leave_signal_stack(task);
  set_my_task(nullptr);
  retire(task);
  // Last: run() waits for this count to reach zero before it frees Tasks.
  if (rt.os_threads.fetch_sub(1, std::memory_order_acq_rel) == 1)
    futex_wake(&rt.os_threads, 1);
}

extern "C" void* os_thread_entry(void* arg) {
  run_os_thread(static_cast<Start*>(arg));
  return nullptr;
}

// create_detached starts os_thread_entry(st) with the process's default
// thread attributes (pthread_setattr_default_np honoured, as by
// std::thread), narrowed to `narrow` if given; returns pthread_create's error.
int create_detached(Start* st, const cpu_set_t* narrow) {
  pthread_attr_t attr;
  if (int e = pthread_getattr_default_np(&attr)) return e;
  int e = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (e == 0 && narrow) e = pthread_attr_setaffinity_np(&attr, sizeof *narrow, narrow);
  if (e == 0 && narrow && fault_injection::should_fail(fault_injection::fail_narrowed_start))
    e = EPERM;
  pthread_t id;
  if (e == 0) e = pthread_create(&id, &attr, &os_thread_entry, st);
  pthread_attr_destroy(&attr);
  return e;
}

}  // namespace

void start_os_thread(Task* task, void (*body)(Task*), bool elsewhere) {
  rt.os_threads.fetch_add(1, std::memory_order_relaxed);
  try {
    if (fault_injection::should_fail(fault_injection::fail_os_thread_start) ||
        fault_injection::refuse_os_threads.load(std::memory_order_relaxed))
      throw std::system_error(EAGAIN, std::generic_category(),
                              "capstan: cannot start an OS thread (fault injected by a test)");
    auto st = std::make_unique<Start>(Start{task, body, false, {}});
    // Note [Starting on another CPU].  A Task comes from new_task, so its
    // creator_cpu and start_cpu read -1 here.
    int here = elsewhere ? sched_getcpu() : -1;
    cpu_set_t others;
    bool narrowed = here >= 0 && here < CPU_SETSIZE &&
                    sched_getaffinity(0, sizeof st->mask, &st->mask) == 0 &&
                    CPU_COUNT(&st->mask) >= 2 && CPU_ISSET(here, &st->mask);
    if (narrowed) {
      others = st->mask;
      CPU_CLR(here, &others);
      st->widen = true;
    }
    int e = create_detached(st.get(), narrowed ? &others : nullptr);
    if (e != 0 && narrowed) {  // the narrowing refused: start it as std::thread would
      narrowed = st->widen = false;
      e = create_detached(st.get(), nullptr);
    }
    if (e) throw std::system_error(e, std::generic_category(), "capstan: cannot start an OS thread");
    st.release();  // the thread owns it now (and may have freed it)
    if (narrowed) task->creator_cpu.store(here, std::memory_order_relaxed);
  } catch (...) {
    // As a thread that ends: run() may be waiting for this count to reach
    // zero (a start racing with the stop).
    if (rt.os_threads.fetch_sub(1, std::memory_order_acq_rel) == 1) futex_wake(&rt.os_threads, 1);
    rt.tasks_created.undo();  // it never became an OS thread
    retire(task);
    throw;
  }
}

}  // namespace capstan::rts
