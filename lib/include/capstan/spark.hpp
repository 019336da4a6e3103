// spark.hpp - GHC's `par`: work that *may* run in parallel.
//
//   auto s = capstan::par([&] { return fib(n - 1); });   // a spark
//   int b = fib(n - 2);
//   int a = s.get();   // GHC's pseq: runs it here unless an idle capability took it
//
// Lifetime rule: a spark lives in the frame of the thread that made it and
// refers to that frame (its closure's captures).  get() or the destructor
// settles it before the frame goes away: an unforced spark that nobody took
// is discarded (counted GC'd) and never runs afterwards; one that an idle
// capability is already running is waited for - by the destructor even
// when get() was interrupted (kill_thread, a timeout) and the frame is
// unwinding.  So captures by reference are safe for as long as the spark
// object lives.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/detail/outcome.hpp"

namespace capstan {

template <class R>
class spark;

namespace detail {

struct spark_base;

// A capability's spark pool: a fixed-size ring of spark pointers.  It is
// owner-private (Acar, Chargueraud and Rainey, PPoPP 2013): only the Task
// running the capability pushes, pops and removes, with plain loads and
// stores - no fence, no read-modify-write - and idle capabilities get sparks
// by *asking* (request) instead of by stealing concurrently.  top/bottom are
// atomics only so that thieves may read them as a size hint; the owner
// writes them with relaxed load+store pairs, which compile to plain moves.
// See Note [Spark pools] in rts/sparks/pool.cpp.
struct spark_pool {
  std::atomic<std::uint64_t> top{0};     // next free index (owner end)
  std::atomic<std::uint64_t> bottom{0};  // oldest index (the end idle capabilities get)
  std::uint64_t mask = 0;                // capacity - 1
  spark_base** slots = nullptr;          // null entries are removed sparks
  std::atomic<rts::Capability*> request{nullptr};  // a thief's steal request (low bit: early)
  rts::Capability* cap = nullptr;                 // the owner
  // Owner-written counters (relaxed stores), read by statistics.
  std::atomic<std::uint64_t> created{0}, overflowed{0}, fizzled{0}, gcd{0};
  // [owner] par()s left before it next tries to wake a sleeper after a try
  // that found no free CPU: Note [Waking capabilities for sparks].
  std::uint32_t wake_skip = 0;

  std::uint64_t size() const {
    return top.load(std::memory_order_relaxed) - bottom.load(std::memory_order_relaxed);
  }
};

inline void bump(std::atomic<std::uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// The pool of the capability the calling OS thread runs, or null, is
// tl_here.pool (detail/bridge.hpp; default TLS model: libcapstan.so has no
// static TLS and can be dlopen()ed).

// current_spark_pool returns tl_here.pool.  Out of line on purpose: see
// Note [TLS across a switch] in rts/task/task.hpp.
spark_pool* current_spark_pool() noexcept;

// spark_pool_here is what par() and get() use, once each, before they can
// switch.  In an executable on x86-64 the inline read is safe: it is one
// %fs-relative load whose thread pointer the CPU takes from %fs at every
// access, so no thread pointer from before a switch can be reused.
// Elsewhere (AArch64, where the compiler may keep tpidr_el0 in a register
// across a call; shared objects, where __tls_get_addr's result may be
// reused) it is the out-of-line call.  Note [TLS across a switch].
inline spark_pool* spark_pool_here() noexcept {
#if defined(__x86_64__) && (!defined(__PIC__) || defined(__PIE__))
  return tl_here.pool;
#else
  return current_spark_pool();
#endif
}

// Where the maker of a stolen spark waits for it: a gate on the maker's
// stack (rts/sparks/sparks.cpp).
struct spark_gate;

struct spark_base {
  // pending: in a pool; taken: being run by its maker, inline; stolen: a
  // spark thread runs (or will run) it; done: settled - evaluated, or
  // cancelled unrun at shutdown (then it holds no result); unpooled: the
  // pool was full (overflowed), or a spark thread that could not start
  // gave it back - get() runs it inline; stolen_waiting:
  // stolen, and its maker waits for it at `gate` (set by the runtime, Note
  // [Completing a stolen spark] in rts/sparks/sparks.cpp).
  enum state_t : unsigned { pending, taken, stolen, done, unpooled, stolen_waiting };

  // Evaluates the closure into the result; returns whether the spark's
  // destructor has nothing left to do once the spark is settled (Note [A
  // spark's fast path]).  run(s, false) - a spark thread - catches the
  // closure's exception into the result; run(s, true) - the maker, in
  // get() - puts the spark back to unevaluated and lets it go on (Note
  // [Evaluating a spark here] in rts/sparks/sparks.cpp).
  bool (*run)(spark_base*, bool here) = nullptr;
  std::atomic<unsigned> state{pending};
  std::uint64_t index;             // position in pool->slots (owner-only; set by push)
  spark_pool* pool;                // where it was pushed, null if unpooled (set by push)
  // The maker's gate while it waits for a stolen spark: written by the
  // maker before its CAS to stolen_waiting (release), read by the spark
  // thread after its exchange saw stolen_waiting (acquire).
  spark_gate* gate;
};

// Capabilities asleep in their idle loop; par() wakes one of them (Note
// [Waking capabilities for sparks] in rts/sparks/pool.cpp).
extern std::atomic<unsigned> g_spark_sleepers;

// Out-of-line halves (rts/sparks/sparks.cpp).
[[noreturn]] void spark_outside_runtime();  // throws usage_error: par() off a green thread
void spark_respond(spark_pool* p);        // answer a pending steal request
void spark_force_slow(spark_base* s);     // get() when the fast path cannot
void spark_discard_slow(spark_base* s) noexcept;  // ~spark of an unforced spark: never throws
void spark_overflow(spark_pool* p) noexcept;
bool spark_make_room(spark_pool* p) noexcept;  // drops holes; true if not full now
// spark_wake_sleeper wakes one sleeping capability for sparks if a CPU is
// free; false if none was (Note [Waking capabilities for sparks]).
bool spark_wake_sleeper() noexcept;
void spark_wake_sleeper_for(spark_pool* p) noexcept;  // par()'s: backs off while no CPU is free
[[noreturn]] void spark_cancelled();       // throws thread_killed
[[noreturn]] void spark_got_twice();       // throws usage_error: get() after its value was taken
[[noreturn]] void spark_rethrow(const std::exception_ptr& e);
// spark_evaluation_interrupted puts a spark whose evaluation by its maker
// threw back to unevaluated (Note [Evaluating a spark here]).
void spark_evaluation_interrupted(spark_base* s) noexcept;

}  // namespace detail

// spark<R>: the handle par() returns.  Not copyable or movable: it stays in
// the frame that made it (the pool points at it).
//
// Note [A spark's fast path]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A fine-grained spark (parfib 32 2 makes 3.5 M) lives for a par(), the
// caller's own work and a get() that finds it on top of its pool: no
// capability ever looked at it.  What that life costs is instructions - the
// machine runs them at about four a cycle - so the object is laid out for
// it: the closure sits in `buf_` (or, too big for it, a pointer to it on
// the heap does), and `run`, generated per closure type, knows which; one
// `cleanup_` pointer, null for a closure that is inline and trivially
// destructible, replaces a destroy function and a heap flag; the result is
// an outcome<R> (detail/outcome.hpp), a union with a one-byte tag whose
// "nothing" doubles as "cancelled" (a spark settled unrun at shutdown), so
// get() tests one byte for the exception, the cancellation and the
// missing value together.  And
// `run` answers whether the destructor will have anything to do (a closure
// to destroy or free, a result or an exception to destroy); get()'s fast
// path keeps the answer in `tidy_`, a field only the maker touches, so
// ~spark of a spark that fizzled that way is one test, with everything
// else - the state check, the discard, the destruction - out of line in
// untidy().  Measured in parfib 32 2 -N1 against the layout before
// (closure pointer, destroy pointer, heap flag, outcome<R>, cancelled
// flag): docs/benchmarks.md, "Sparks".
template <class R>
class spark : detail::spark_base {
  static constexpr std::size_t kInline = 48;
  // Where a heap closure lives: never less aligned than Fn wants.
  template <class Fn>
  static constexpr std::align_val_t kHeapAlign{alignof(Fn) > alignof(std::max_align_t)
                                                   ? alignof(Fn)
                                                   : alignof(std::max_align_t)};

 public:
  spark(const spark&) = delete;
  spark& operator=(const spark&) = delete;

  // get returns f's result, evaluating f here if no other capability has
  // taken it, or waiting (parked, not spinning) for the one running it; an
  // asynchronous exception ends that wait at once (the spark runs on).
  // When a spark thread evaluated f, f's exception is the result, rethrown
  // by every get().  When get() evaluates f here, an exception - f's own,
  // or an asynchronous one that interrupts it (a timeout, throw_to) - goes
  // on as from a call, and a later get() evaluates f afresh (GHC resumes an
  // interrupted evaluation; C++ cannot).  f completes at most once.
  R get() {
    detail::safe_point_here();  // Note [A spark's safe point]
    detail::spark_pool* p = detail::spark_pool_here();  // after it: we may have moved
    if (pool == p && state.load(std::memory_order_relaxed) == pending &&
        index + 1 == p->top.load(std::memory_order_relaxed)) [[likely]] {
      // Our own spark on top of our own pool: pop it and run it (fizzled).
      // Once out of the pool nobody else can see it: no `taken` store needed.
      p->top.store(index, std::memory_order_relaxed);
      detail::bump(p->fizzled);
      tidy_ = run(this, true);  // Note [Evaluating a spark here]
      state.store(done, std::memory_order_relaxed);  // a second get() must not pop again
    } else if (state.load(std::memory_order_acquire) != done) {
      detail::spark_force_slow(this);
    }
    if (!out_.has_value()) [[unlikely]] {
      if (out_.failed()) detail::spark_rethrow(out_.error());
      if (out_.taken()) detail::spark_got_twice();  // the value was moved out
      detail::spark_cancelled();  // settled unrun: shutdown came first
    }
    return out_.take_value();
  }

  // ~spark discards an unforced spark, or waits (uninterruptibly) for the
  // capability that runs it: Note [Completing a stolen spark].
  ~spark() {
    if (!tidy_) [[unlikely]] untidy();
  }

 private:
  template <class F>
  friend auto par(F&& f) -> spark<std::invoke_result_t<std::decay_t<F>&>>;

  template <class Fn>
  static constexpr bool fits = sizeof(Fn) <= kInline && alignof(Fn) <= alignof(std::max_align_t);

  // untidy is ~spark's work for a spark that did not fizzle on get()'s fast
  // path, or whose closure or result needs destroying.
  [[gnu::noinline]] void untidy() noexcept {
    if (state.load(std::memory_order_acquire) != done) detail::spark_discard_slow(this);
    if (cleanup_) cleanup_(buf_);
    out_.~outcome();
  }

  template <class Fn>
  Fn& closure() noexcept {
    if constexpr (fits<Fn>) {
      return *std::launder(reinterpret_cast<Fn*>(buf_));
    } else {
      return **std::launder(reinterpret_cast<Fn**>(buf_));
    }
  }

  template <class F>
  explicit spark(F&& f) : out_() {
    using Fn = std::decay_t<F>;
    if constexpr (fits<Fn>) {
      ::new (static_cast<void*>(buf_)) Fn(std::forward<F>(f));
      if constexpr (!std::is_trivially_destructible_v<Fn>)
        cleanup_ = [](void* c) noexcept { std::launder(static_cast<Fn*>(c))->~Fn(); };
    } else {
      void* mem = ::operator new(sizeof(Fn), kHeapAlign<Fn>);
      Fn* fn;
      try {
        fn = ::new (mem) Fn(std::forward<F>(f));
      } catch (...) {
        ::operator delete(mem, kHeapAlign<Fn>);
        throw;
      }
      ::new (static_cast<void*>(buf_)) Fn*(fn);
      cleanup_ = [](void* c) noexcept {
        Fn* heap = *std::launder(static_cast<Fn**>(c));
        heap->~Fn();
        ::operator delete(heap, kHeapAlign<Fn>);
      };
    }
    run = [](spark_base* b, bool here) {
      auto* self = static_cast<spark*>(b);
      bool trivial_value;
      if (here) {
        try {
          trivial_value = self->out_.evaluate(self->template closure<Fn>());
        } catch (...) {
          detail::spark_evaluation_interrupted(b);  // unevaluated again
          throw;
        }
      } else {
        trivial_value = self->out_.capture(self->template closure<Fn>());
      }
      return trivial_value && fits<Fn> && std::is_trivially_destructible_v<Fn>;
    };
    push();
  }

  // Always inline: it is most of par(), and GCC's heuristics have left it
  // out of line (9 instructions a spark more in parfib 25 2).
  [[gnu::always_inline]] void push() {
    detail::spark_pool* p = detail::spark_pool_here();
    if (!p) [[unlikely]] {
      // Not on a green thread: no ~spark will run, so undo the closure
      // before the usage error leaves the constructor.
      if (cleanup_) cleanup_(buf_);  // (out_ holds nothing yet)
      detail::spark_outside_runtime();
    }
    std::uint64_t t = p->top.load(std::memory_order_relaxed);
    if (t - p->bottom.load(std::memory_order_relaxed) > p->mask) [[unlikely]] {
      if (!detail::spark_make_room(p)) {
        pool = nullptr;
        state.store(unpooled, std::memory_order_relaxed);  // full: GHC drops the new spark
        detail::spark_overflow(p);
        return;
      }
      t = p->top.load(std::memory_order_relaxed);
    }
    index = t;
    pool = p;
    p->slots[t & p->mask] = this;
    p->top.store(t + 1, std::memory_order_relaxed);
    detail::bump(p->created);
    if (p->request.load(std::memory_order_relaxed)) [[unlikely]] detail::spark_respond(p);
    if (detail::g_spark_sleepers.load(std::memory_order_relaxed)) [[unlikely]] {
      if (p->wake_skip == 0) detail::spark_wake_sleeper_for(p); else --p->wake_skip;
    }
  }

  void (*cleanup_)(void*) noexcept = nullptr;  // destroys (and frees) the closure
  bool tidy_ = false;             // [maker] nothing left for ~spark: see the Note
  // The result: written by whoever runs the spark, before its store
  // (maker) or exchange (thief) of `done`; read by the maker after it saw
  // `done`.  In a union so that ~spark destroys it only in untidy().
  union {
    detail::outcome<R> out_;
  };
  alignas(std::max_align_t) unsigned char buf_[kInline];
};

// par(f) sparks f: an idle capability may evaluate it in parallel; get()
// evaluates it here otherwise.
template <class F>
auto par(F&& f) -> spark<std::invoke_result_t<std::decay_t<F>&>> {
  return spark<std::invoke_result_t<std::decay_t<F>&>>(std::forward<F>(f));
}

}  // namespace capstan
