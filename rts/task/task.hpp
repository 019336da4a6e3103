// task.hpp - Task: an OS thread known to the runtime (GHC's Task).
//
// A Task holds at most one capability at a time, and a capability is held
// by at most one Task (Capability::running_task).  Kinds of Task:
//   main     - the OS thread that called run(); serves the bound main thread;
//   worker   - made by the runtime: one per capability at start, and spares
//              that take a capability over while its Task is in a safe call;
//   os_bound - made by fork_os for one bound green thread;
//   foreign  - an OS thread that entered through call_in, for one bound
//              in-call thread.  A Task that calls in from inside its own
//              safe call keeps its kind (in_call.cpp saves and restores
//              its scheduler context instead).
// Every kind runs green threads while it holds a capability - a bound
// Task runs unbound threads too (Note [Bound threads] in schedule/schedule.cpp).
// A Task has its own native "scheduler context": the stack it entered
// schedule() on.  Green threads switch among themselves directly and fall
// back to the scheduler context only when their capability has nothing else
// to run for this Task.  Handing capabilities between Tasks: see Note
// [Handing over a capability] in task/handover.cpp.
//
// Note [TLS across a switch]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A green thread may continue on a different OS thread after any switch.  A
// compiler may compute a thread-local's address (or the thread pointer,
// e.g. AArch64's tpidr_el0, or __tls_get_addr's result in a shared object)
// once per function and keep it in a callee-saved register, which our
// switch faithfully preserves - pointing at the previous OS thread's TLS.
// So the runtime reads its TLS only through my_task(), which is noinline
// (and therefore re-evaluated after every call), and never caches a Task*
// or Capability* across a call that may switch: re-read my_task()->cap.
//
// User code sees one thread-local, detail::tl_here (capstan/detail/
// bridge.hpp), written whole when a Task takes or drops a capability
// (task/handover.cpp): the spark pool that par() and get() read
// (detail::spark_pool_here in capstan/spark.hpp), the biased-lock owner
// flag of an mvar's lock (detail::bias_owner_here in
// capstan/detail/mvar_core.hpp) and the capability's context_switch word
// that every runtime call's safe point tests (detail::safe_point_here in
// capstan/detail/bridge.hpp).  Each is read inline only where no thread
// pointer can be reused: code for an executable on x86-64, where the read
// is a single %fs-relative load (the CPU takes %fs, which the kernel
// switches with the OS thread, at every access).  Everywhere else it is a
// noinline call (detail::current_spark_pool(), current_bias_owner(),
// safe_point()).
//
// Every thread-local of the library uses the default TLS model (descriptors
// on x86-64, -mtls-dialect=gnu2, and AArch64): libcapstan.so needs no
// static TLS, so it can be dlopen()ed (tests/lib/dlopen_test.cpp).
#pragma once

#include <signal.h>

#include <atomic>
#include <cstddef>
#include <thread>

#include "primitives/parker.hpp"
#include "thread/thread.hpp"
#include "storage/thread_slabs.hpp"
#include "thread/thread_ids.hpp"

namespace capstan::detail {
class mvar_core;
}

namespace capstan::rts {

struct Capability;

// What the context that lands after a switch must do on behalf of the one
// that left (the leaving context cannot do it: it is no longer running).
// See Note [Blocking on an MVar] and Note [Finishing a thread].
struct PostSwitch {
  Thread* dead = nullptr;                    // recycle its stack and object
  std::atomic<bool>* unlock = nullptr;       // a lock word to release after the blocker's context is saved
  Thread* migrant = nullptr;                 // send to migrate_to's inbox once off its stack
  Capability* migrate_to = nullptr;
  bool migrant_returning = false;             // a thread returning from a safe call
  // dead or migrant is set: the landing side tests this one byte, not
  // both pointers (the common switch has neither).  Set through the two
  // functions below, never directly.
  bool rare = false;

  void leave_dead(Thread* t) noexcept {
    dead = t;
    rare = true;
  }
  void send_migrant(Thread* t, Capability* to, bool returning) noexcept {
    migrant = t;
    migrate_to = to;
    migrant_returning = returning;
    rare = true;
  }
};

enum class TaskKind : std::uint8_t { main, worker, os_bound, foreign };

struct alignas(64) Task {  // aligned: Tasks are written by their own OS threads
  Capability* cap = nullptr;     // [owner] the capability held, or null
  void* sched_sp = nullptr;      // [owner] saved scheduler (native) context
  PostSwitch post;               // [owner: this OS thread] written by the leaving side, run by the landing side
  Parker parker;                 // [atomic] sleeps here when idle, spare, or waiting for a capability
  TaskKind kind = TaskKind::worker;  // [written by new_task under rt.tasks_mu]
  unsigned no = 0;                   // [written once by new_task under rt.tasks_mu] index in rt.tasks

  // --- hand-over (Note [Handing over a capability]) ------------------------
  std::atomic<bool> given{false};  // [atomic] giver: release after the two below
  Capability* given_cap = nullptr;  // [giver writes, then this Task reads]
  Thread* given_thread = nullptr;   // run first (a thread bound to this Task), or null
  Capability* last_cap = nullptr;    // [owner] capability held last (spare of / in-call hint)
  Task* next_spare = nullptr;        // [lock: last_cap->spare_lock]

  // --- bound threads (Note [Bound threads]) --------------------------------
  Thread* bound_thread = nullptr;  // [owner] the bound thread this Task serves, while it lives
  bool bound_done = false;         // [owner] it finished: leave schedule()
  bool give_cap_to_spare = false;  // [owner] Note [Unbound threads on a bound Task]
  // The green thread whose safe call this Task is running, or null: read by
  // shutdown (relaxed) to wait for foreign calls.  Note [Shutdown].
  std::atomic<Thread*> in_safe_call{nullptr};
  ThreadCache threads;             // [owner] Thread objects for in-call threads
  IdBlock ids;  // [owner writes, relaxed; anyone reads] ids for in-call threads

  // Cached per-OS-thread locations (valid: a Task never changes OS thread).
  int* errno_loc = nullptr;        // [owner]
  EhGlobals* eh = nullptr;         // [owner]

  // Alternate signal stack (overflow_handler.hpp).
  void* alt_stack = nullptr;       // [owner]
  stack_t prev_alt_stack{};        // [owner]

  // Where its OS thread started (Note [Starting on another CPU]), for tests
  // and diagnosis; -1 when unknown (a Task reused by an in-call, say).
  // creator_cpu: [start_os_thread writes, relaxed] the starter's CPU when
  // it asked for another.  start_cpu: [the new thread writes once,
  // relaxed] the CPU it first ran on.
  std::atomic<int> creator_cpu{-1};
  std::atomic<int> start_cpu{-1};
  // os_tid: [the bound OS thread writes, relaxed; the hog warner reads] its
  // kernel thread id, whose CPU clock tells a hog from a capability whose
  // OS thread the kernel is not running (Note [Warning about a hog]).
  std::atomic<int> os_tid{0};

  // Sanitizer state of the native scheduler context.
  void* tsan_fiber = nullptr;             // [owner]
  const void* native_stack_lo = nullptr;  // [owner]
  std::size_t native_stack_size = 0;      // [owner]

  // reset_for_reuse: a retired Task made ready for another kind of use.
  void reset_for_reuse() noexcept;
};

// my_task returns the calling OS thread's Task, or null if it has none.
// Never inlined: see Note [TLS across a switch].
Task* my_task() noexcept;
void set_my_task(Task* t) noexcept;

extern constinit thread_local Task* tl_task_slot;

// my_task_before_switch is the inlined read of the same slot, for hot paths
// that use the result only *before* their first switch (a compiler may
// reuse the thread-local's address within a function, never across the
// functions that run after we are resumed elsewhere).
inline Task* my_task_before_switch() noexcept { return tl_task_slot; }

// The current stack pointer (for the software overflow check).
inline void* stack_pointer() noexcept {
  void* sp;
#if defined(__x86_64__)
  asm volatile("mov %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
  asm volatile("mov %0, sp" : "=r"(sp));
#else
  sp = __builtin_frame_address(0);
#endif
  return sp;
}

// new_task returns a Task of `kind` for this run (reusing a retired one).
Task* new_task(TaskKind kind);
// start_os_thread runs body(task) on a new OS thread, counted in
// rt.os_threads; on exit the Task is retired.  Throws std::system_error.
// With `elsewhere`, the new thread starts on a CPU other than the caller's
// (if the affinity mask has another), then widens to the whole mask: Note
// [Starting on another CPU].
void start_os_thread(Task* task, void (*body)(Task*), bool elsewhere = false);

// Fills in the per-OS-thread caches of a Task running on the calling thread.
void bind_task_to_this_os_thread(Task* t);
// Records the sanitizer state (TSan fiber) of the calling thread's context.
void init_task_sanitizer_state(Task* t);

}  // namespace capstan::rts
