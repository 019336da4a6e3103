// detail/bridge.hpp - the narrow, type-erased door from the public templates
// into the runtime.  Not part of the API: names here may change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <type_traits>
#include <utility>

#include "capstan/errors.hpp"

// The runtime's objects, opaque to the public headers (defined in rts/):
// public code holds typed pointers to them and never looks inside.
namespace capstan::rts {
struct Thread;      // a green thread (GHC's TSO)
struct Capability;  // a virtual CPU
struct Task;        // an OS thread known to the runtime
}  // namespace capstan::rts

namespace capstan::detail {

// Where a new thread goes: a capability number (fork_on: any unsigned,
// taken modulo -N, so wider than int), or one of these.
inline constexpr long long kAnyCapability = -1;
inline constexpr long long kBoundOsThread = -2;  // fork_os

// How the runtime runs and destroys a closure stored inside a thread.
// invoke returns true if the closure returned, false if it ended by
// thread_killed (caught there); any other exception propagates.
struct closure_ops {
  bool (*invoke)(void* closure);
  void (*destroy)(void* closure) noexcept;
};

template <class Fn>
struct ops_for {
  // The catch is here rather than in the runtime's thread_entry so that a
  // killed thread's unwinding stops one frame sooner: see Note [Where a
  // kill is caught] in rts/schedule/fork.cpp.
  static bool invoke(void* p) {
    try {
      (*static_cast<Fn*>(p))();
      return true;
    } catch (const thread_killed&) {
      return false;
    }
  }
  static void destroy(void* p) noexcept { static_cast<Fn*>(p)->~Fn(); }
  static constexpr closure_ops value{&invoke, &destroy};
};

// A started thread as the runtime names it: its id, and `where` - the
// address of its Thread object tagged with the run's number in the top 16
// bits (0 if unknown), which lets the runtime find a live thread without a
// search and recognise an id from an earlier run.  Thread objects are never
// freed while a run lasts, and a recycled one no longer carries the id.
struct thread_ref {
  std::uint64_t id = 0;
  std::uintptr_t where = 0;
};

// A thread that is allocated but not yet started, with closure storage.
struct thread_slot {
  rts::Thread* thread;
  void* storage;
};

// thread_alloc reserves a thread with `size` bytes of closure storage
// (inline for small closures, so forking does not allocate).
thread_slot thread_alloc(std::size_t size, std::size_t align, long long cap);
// thread_discard gives back a thread whose closure failed to construct.
void thread_discard(rts::Thread* thread) noexcept;
// thread_start makes a constructed thread runnable; returns its name.
thread_ref thread_start(rts::Thread* thread, const closure_ops* ops, long long cap);

template <class F>
thread_ref spawn(long long cap, F&& f) {
  using Fn = std::decay_t<F>;
  thread_slot s = thread_alloc(sizeof(Fn), alignof(Fn), cap);
  try {
    ::new (s.storage) Fn(std::forward<F>(f));
  } catch (...) {
    thread_discard(s.thread);
    throw;
  }
  return thread_start(s.thread, &ops_for<Fn>::value, cap);
}

// safe_point yields if the calling green thread's timeslice has expired (or
// the runtime wants it back); a no-op on an OS thread running no green
// thread.  Out of line on purpose: see Note [TLS across a switch] in
// rts/task/task.hpp.
void safe_point();

struct spark_pool;  // capstan/spark.hpp

// capability_here is what the inline fast paths of the public headers
// need to know of the capability the calling OS thread holds: all null
// (false) while it holds none.  One thread-local, written whole wherever a
// Task takes or drops a capability (rts/task/handover.cpp), so that those
// writes share one thread-pointer offset.  Read inline only where that is
// safe across a switch (Note [TLS across a switch] in rts/task/task.hpp).
struct capability_here {
  spark_pool* pool = nullptr;  // its spark pool: par() and get() (spark.hpp)
  // Its context_switch word, which the ticker, throwers and shutdown set:
  // a safe point acts when it is not 0 (safe_point_here, below).
  const std::atomic<std::uint32_t>* preempt = nullptr;
  // It is the one capability of a run with biased mvar locks (Note
  // [Biased locks] in detail/mvar_core.hpp).
  bool bias_owner = false;
};
extern constinit thread_local capability_here tl_here;

// safe_point_here is safe_point() with its test inline: a word that is 0
// (or no capability) costs two loads and no call.  Inline only where a
// thread-local read cannot reuse another OS thread's thread pointer, as
// spark_pool_here in capstan/spark.hpp; elsewhere it is the call.  A
// non-zero word on a Task that runs no green thread (its scheduler
// context) goes to safe_point(), which checks that and does nothing.
inline void safe_point_here() {
#if defined(__x86_64__) && (!defined(__PIC__) || defined(__PIE__))
  const std::atomic<std::uint32_t>* w = tl_here.preempt;
  // Relaxed: a hint, as in safe_point(); the slow path's exchange acquires.
  if (w && w->load(std::memory_order_relaxed) != 0) [[unlikely]] safe_point();
#else
  safe_point();
#endif
}

// count_ended_by counts, for statistics(), a green thread whose function
// ended by exception e although the thread itself ends normally because a
// wrapper caught e to hand it on: main (run rethrows it), an in-call
// (call_in rethrows it), an async child (wait rethrows it).  threads_died
// always, and threads_killed or blocked_indefinitely by e's type.  Call it
// on that thread.
void count_ended_by(const std::exception_ptr& e) noexcept;

// counting(f) is f, calling count_ended_by with whatever f throws on its
// way out (run's main and call_in's function).
template <class F>
auto counting(F& f) {
  return [&f]() -> decltype(auto) {
    try {
      return f();
    } catch (...) {
      count_ended_by(std::current_exception());
      throw;
    }
  };
}

// run_main runs fn(ctx) as the bound main green thread of a new runtime.
struct options_ref;
void run_main(const void* opts, void (*fn)(void*), void* ctx);

}  // namespace capstan::detail
