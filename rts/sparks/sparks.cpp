// sparks.cpp - spark threads, and the slow halves of spark<R>::get and
// ~spark (the inline halves are in lib/include/capstan/spark.hpp).  The
// pools and stealing are in sparks/pool.cpp: Note [Spark pools].
#include "sparks/sparks.hpp"

#include <exception>
#include <new>

#include "capstan/async_exception.hpp"
#include "capstan/errors.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"
#include "task/green_thread.hpp"

namespace capstan::rts {

using detail::spark_base;
using detail::spark_pool;

namespace {

// Note [Completing a stolen spark]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The maker may read `done` without any lock (get()'s and ~spark's quick
// check) and then free the spark at once, so the thief's store of `done` must
// be its last touch of the spark - unless the maker is waiting, in which case
// the maker cannot leave until the thief has told it.  The maker waits at a
// gate on its own stack: an mvar_core and a `completed` flag (an Event: the
// waiter is served if queued, else the flag is set).  Parking there is an
// ordinary mvar_core park, so throw_to, timeouts, the shutdown killer and
// deadlock detection find and interrupt it like any mvar wait (Note
// [Raising asynchronously] in schedule/raise.cpp).  The state word says who
// owns the hand-over:
//   maker:  a gate on its stack; s->gate = &gate; CAS stolen ->
//           stolen_waiting (acq_rel: publishes s->gate).  If the CAS fails
//           the thief has been: look at the state again.  Else wait at the
//           gate: lock it; if completed, go on; else queue a waiter and
//           park; then look at the state again.
//   thief:  prev = exchange(done) (acq_rel) - or exchange(unpooled), when
//           a spark thread that never got a stack gives the spark back
//           (give_back: the maker then runs it itself, Note [Running out of
//           stacks] in storage/stack.cpp); everything below holds for
//           either.  prev == stolen: nobody waits,
//           and the spark is never touched again.  prev == stolen_waiting:
//           read s->gate, lock it, serve the waiter if one is queued, else
//           set completed; unlock (its last touch of gate and spark); wake
//           the served maker (wake_home: back where its other sparks are).
// The exchange and the CAS are ordered on the same word, so exactly one of
// "the thief sees a waiter" and "the maker sees done" happens; the gate's
// lock orders the thief's notice against the maker's wait, so the wake-up
// cannot be lost (the Event pattern, mvar/event.hpp).
//
// Interrupted.  An exception thrown to the waiting maker (or thread_killed
// at shutdown) dequeues its waiter under the gate's lock - exactly one of
// the thief's serve and the interrupt gets it, as for any mvar waiter - and
// the maker's park throws.  Before the exception leaves wait_stolen (and
// with it the gate's frame) the maker *withdraws*: CAS stolen_waiting ->
// stolen.  If it succeeds the thief has not completed yet; its exchange
// will see `stolen`, and it will never touch the gate.  If it fails the
// thief's exchange came first: it is on its way to the gate (a few
// instructions, no safe point in between), so the maker waits there again,
// shielded (park_shielded: nothing interrupts it), until the thief has
// set `completed` or served it; only then does the gate die.  So the gate
// outlives every touch, whichever of the completion and the interrupt wins.
//
// Destroying a stolen spark.  The thief writes the result into the spark
// and reads the closure's captures, so ~spark of a stolen, unfinished spark
// must wait for it - also when get() was interrupted and the maker's stack
// is unwinding (the spark is destroyed during that unwinding, its state
// back at `stolen` after the withdrawal).  That wait cannot throw (a
// destructor; during unwinding a throw would terminate()): it is the same
// gate protocol with the shielded park.  A thread killed while waiting for
// a long spark therefore finishes unwinding only when the spark does; the
// exception has been raised at once (throw_to returns), the spark keeps
// its captures alive.  Throws queued meanwhile land at the next safe point.
// Checked by models/spark_steal.pml (docs/models.md), the give-back exit
// and the maker's look at the state after its wait included.
constexpr unsigned kStolenWaiting = spark_base::stolen_waiting;

}  // namespace

}  // namespace capstan::rts

namespace capstan::detail {

// Lives in the waiting maker's frame; see the Note.
struct spark_gate {
  mvar_core core;
  bool completed = false;  // [lock: core] the thief came while nobody was queued
};

}  // namespace capstan::detail

namespace capstan::rts {

using detail::spark_gate;

namespace {

// complete publishes a stolen spark's result and tells its maker if it waits.
void complete(spark_base* s) {
  unsigned prev = s->state.exchange(spark_base::done, std::memory_order_acq_rel);
  if (prev != kStolenWaiting) return;  // the spark may be gone already
  spark_gate* g = s->gate;  // alive until our unlock: the maker waits for it
  Thread* served = nullptr;
  g->core.lock();
  if (detail::waiter* w = g->core.front()) served = g->core.serve(*w);
  else g->completed = true;
  g->core.unlock();  // last touch of gate and spark
  if (served) wake_home(served);
}

// gate_wait waits at g until the thief has been there; `shielded`: nothing
// interrupts it, else it throws what interrupted it.
void gate_wait(spark_gate& g, bool shielded) {
  g.core.lock();
  if (g.completed) {
    g.core.unlock();
    return;
  }
  detail::waiter w(detail::waiter::spark);
  g.core.enqueue(w);
  if (shielded) g.core.park_shielded(w);
  else g.core.park(w);
}

// wait_stolen parks the calling maker until the spark thread completes s;
// `interruptible`: an asynchronous exception ends the wait (get()).
void wait_stolen(spark_base* s, bool interruptible) {
  spark_gate gate;
  s->gate = &gate;
  unsigned expected = spark_base::stolen;
  if (!s->state.compare_exchange_strong(expected, kStolenWaiting, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
    return;  // the thief has been: done, or given back
  if (!interruptible) {
    gate_wait(gate, true);
    return;
  }
  try {
    gate_wait(gate, false);
  } catch (...) {
    // Withdraw before the gate dies (see the Note).
    expected = kStolenWaiting;
    if (!s->state.compare_exchange_strong(expected, spark_base::stolen,
                                          std::memory_order_acq_rel, std::memory_order_acquire))
      gate_wait(gate, true);  // the thief came first: wait for its last touch
    throw;
  }
}

// give_back returns a stolen spark that no spark thread will run to its
// maker: `unpooled`, so its get() runs it inline (counted fizzled) and an
// unforced ~spark counts it GC'd; a maker already waiting at the gate is
// served, and looks at the state again (spark_force_slow).  The same
// hand-over as complete(): the exchange is our last touch of the spark
// unless the maker waits.  Note [Running out of stacks] in
// storage/stack.cpp: a spark thread that never got a stack.  Counted as
// unsettled until its maker forces or drops it; a maker abandoned at
// shutdown never does, and run_main counts what is left GC'd.  (Counted
// before the exchange, which may let the maker settle it at once.)
void give_back(spark_base* s) {
  rt.sparks_given_back_unsettled.fetch_add(1, std::memory_order_relaxed);
  unsigned prev = s->state.exchange(spark_base::unpooled, std::memory_order_acq_rel);
  if (prev != kStolenWaiting) return;
  spark_gate* g = s->gate;
  Thread* served = nullptr;
  g->core.lock();
  if (detail::waiter* w = g->core.front()) served = g->core.serve(*w);
  else g->completed = true;
  g->core.unlock();
  if (served) wake_home(served);
}

// cancel settles a stolen spark that will never run (shutdown): done with
// no result, which get() reports as thread_killed (Note [A spark's fast
// path] in capstan/spark.hpp).
void cancel(Capability* cap, spark_base* s) {
  detail::bump(cap->sparks.gcd);
  complete(s);
}

struct SparkThreadClosure {
  spark_base* first;
};

// Note [Spark threads at shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Spark threads are the runtime's, not the program's: one still looking
// for sparks when the program ends is not a thread the program had
// killed, and +RTS -s should not say so (a program that killed nothing
// read "killed 1").  So at shutdown a spark thread ends as finished: it
// settles the sparks it holds (cancel) and returns, whether the shutdown
// finds it at the top of its loop, at the yield between sparks (where the
// shutdown checkpoint throws thread_killed: caught here), or before it
// ever ran (thread_entry counts no kill for it: Thread::spark_thread).
// A closure it runs that is killed at shutdown is another matter: that
// kill is caught into the spark's result, and get() rethrows it.
bool spark_thread_invoke(void* p) {
  spark_base* s = static_cast<SparkThreadClosure*>(p)->first;
  static_cast<SparkThreadClosure*>(p)->first = nullptr;  // ours to run now
  while (s) {
    if (rt.shutting_down.load(std::memory_order_relaxed)) {
      // Nothing runs after shutdown: settle what we hold, unrun.
      Capability* cap = my_task()->cap;
      cancel(cap, s);
      while (cap->n_stolen_sparks) cancel(cap, cap->stolen_sparks[--cap->n_stolen_sparks]);
      return true;
    }
    my_task()->cap->sparks_converted.add();
    s->run(s, false);  // catches the closure's exceptions into the spark
    complete(s);
    Capability* cap = my_task()->cap;
    poll_spark_requests(cap);  // thieves get our oldest sparks between runs
    // Sparks are speculative: ordinary threads come first (GHC's findSpark
    // finds nothing while the run queue is non-empty).  A maker woken by
    // this spark, say, runs before we take the next one.
    if (has_threads(cap)) {
      try {
        yield_current();
      } catch (const thread_killed&) {
        if (!rt.shutting_down.load(std::memory_order_relaxed)) throw;
        cap = my_task()->cap;  // See Note [Spark threads at shutdown]
        while (cap->n_stolen_sparks) cancel(cap, cap->stolen_sparks[--cap->n_stolen_sparks]);
        return true;
      }
      cap = my_task()->cap;
    }
    s = find_spark(cap);
  }
  return true;
}
// A spark thread that never ran settles the sparks it was to run - its
// first, and its capability's backlog (a spark thread running there would
// drain it; the idle loop's find_spark takes from it too) - so that no
// maker waits for them for ever.  Ended for want of a
// stack (Note [Running out of stacks] in storage/stack.cpp), it gives them
// back to their makers, who run them themselves; reclaimed at shutdown
// before its first run, it cancels them, as a running spark thread does
// then (their makers' get() throws thread_killed).  Destroyed once the
// schedulers have stopped (shutdown's reclaiming of leftovers), it only
// counts its first spark GC'd: the makers are abandoned too, and nothing
// may wake them (its capability's backlog is counted by
// spark_pool_release).
void spark_thread_destroy(void* p) noexcept {
  spark_base* first = static_cast<SparkThreadClosure*>(p)->first;
  if (!first) return;  // it ran
  Task* task = my_task();
  if (!task || !task->cap) {
    // Shutdown's reclaiming: counted, though - GC'd, in its maker's pool
    // (no owner runs any more; the spark lives on its maker's stack,
    // mapped until the run ends).
    if (first->pool) detail::bump(first->pool->gcd);
    return;
  }
  if (rt.stop.load(std::memory_order_acquire)) {
    detail::bump(task->cap->sparks.gcd);  // our own pool's counter: we own it
    return;
  }
  Capability* cap = task->cap;
  if (rt.shutting_down.load(std::memory_order_acquire)) {
    cancel(cap, first);
    while (cap->n_stolen_sparks) cancel(cap, cap->stolen_sparks[--cap->n_stolen_sparks]);
    return;
  }
  give_back(first);
  while (cap->n_stolen_sparks) give_back(cap->stolen_sparks[--cap->n_stolen_sparks]);
}

}  // namespace

constinit const detail::closure_ops spark_thread_ops{&spark_thread_invoke, &spark_thread_destroy};

}  // namespace capstan::rts

namespace capstan::detail {

using namespace capstan::rts;

void spark_cancelled() { throw thread_killed{}; }

void spark_got_twice() {
  throw usage_error(
      "capstan::spark::get: the result was already taken by an earlier get() (call it once; "
      "a value is moved out by the first get(), an exception is rethrown by every get())");
}

void spark_rethrow(const std::exception_ptr& e) { std::rethrow_exception(e); }

// Note [A spark's safe point]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// spark<R>::get() is a safe point: a thread whose work is sparks and
// their gets (a parallel fib, say) makes no other runtime call, and
// without one its timeslice never ended, a timeout around it fired only
// when the computation was done, kill_thread waited as long, and at -N1
// every other thread waited too (timeout(20 ms) around pfib(41) returned
// the result after 240 ms).  GHC's par allocates, which is its safe point.
// The check is every runtime call's inline one (safe_point_here, two
// loads and a test: the thread-local's pointer to the capability's
// context_switch word, the one the ticker and throwers set, and the
// word), and only when that word is set does get() call safe_point(),
// before it touches the spark - so an exception raised there
// leaves the spark unforced for ~spark to discard, and a thread that moved
// meanwhile takes get()'s slow path as any moved thread does (Note
// [Migrating to a spark's capability]).  par() is not a safe point: a
// spark that is never forced is rare, and every forced one passes get().
// Tested by Spark.AGetIsASafePointForTimeoutsAndKills.

// Note [Evaluating a spark here]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A spark thread evaluates a spark with run(s, false): whatever the
// closure throws is caught into the spark and is its result, rethrown by
// every get() - as forcing a GHC thunk that raised an exception raises it
// again.  The maker evaluating its own spark in get() calls run(s, true),
// which catches nothing: an exception leaves get() as from a plain call,
// and the spark goes back to unevaluated (out of every pool, like an
// overflowed one; its category, fizzled, stays counted once), so a later
// get() evaluates it afresh.  That is what an asynchronous exception
// raised in the maker during the evaluation needs: a timeout's
// timeout_expired, a throw_to, a kill interrupt the maker, not the
// closure, and GHC would freeze the half-done evaluation for the next
// force to resume, which C++ cannot.  Kept as the result, a later get()
// rethrew it - a timeout_expired that no timeout() frame matched any more
// ended the program in std::terminate.  Telling asynchronous exceptions
// from the closure's own in capture was tried and not kept: the runtime
// noted per thread what it last raised, which misjudged an exception
// object shared by several threads (deadlock detection's), one raised
// before the evaluation began, and a rethrow after a nested timeout had
// fired.  The price of not telling them apart: a closure that throws by
// itself while its maker evaluates it is evaluated again by a later get().
// The reset is in run's landing pad, so get() itself stays as small as it
// was (a try block there made GCC stop inlining it into its callers:
// `parfib 32 2` -N1 18 % slower); on its fast path the difference is one
// argument.  Tested by
// SparkPool.AnAsyncExceptionInAnInlineEvaluationIsNotTheSparksResult and
// SparkStress.InterruptedMakersGetTheValueOnRetry.
void spark_evaluation_interrupted(spark_base* s) noexcept {
  s->pool = nullptr;
  s->state.store(spark_base::unpooled, std::memory_order_relaxed);
}

void spark_force_slow(spark_base* s) {
  for (;;) {
    unsigned st = s->state.load(std::memory_order_acquire);
    if (st == spark_base::done) return;
    if (st == spark_base::stolen) {
      // Only a green thread can wait (named here, not as the mvar under it).
      require_green_thread("capstan::spark::get");
      // Done, or given back (give_back): look again.
      wait_stolen(s, /*interruptible=*/true);
      continue;
    }
    Task* task = require_green_thread("capstan::spark::get");
    if (st == spark_base::unpooled) {  // overflowed (never in a pool), or given back
      if (s->pool) {  // given back: it was created
        bump(task->cap->sparks.fizzled);
        rt.sparks_given_back_unsettled.fetch_sub(1, std::memory_order_relaxed);
      }
      s->state.store(spark_base::taken, std::memory_order_relaxed);
      s->run(s, true);  // Note [Evaluating a spark here]
      s->state.store(spark_base::done, std::memory_order_relaxed);
      return;
    }
    // pending: only the pool's owner may take it out.
    if (s->pool->cap != task->cap) {
      migrate_current_to(s->pool->cap);  // Note [Migrating to a spark's capability]
      continue;
    }
    poll_spark_requests(task->cap);  // a poll point: a thief may want the rest
    if (s->state.load(std::memory_order_relaxed) != spark_base::pending) continue;
    remove_spark(s->pool, s);
    bump(s->pool->fizzled);
    s->state.store(spark_base::taken, std::memory_order_relaxed);
    s->run(s, true);  // Note [Evaluating a spark here]
    s->state.store(spark_base::done, std::memory_order_relaxed);
    return;
  }
}

void spark_discard_slow(spark_base* s) noexcept {
  for (;;) {
    unsigned st = s->state.load(std::memory_order_acquire);
    if (st == spark_base::done) return;
    if (st == spark_base::unpooled) {
      if (s->pool) {  // given back (give_back), never run: it was created
        // With the schedulers gone (shutdown's reclaiming) it stays
        // unsettled, and run_main counts it GC'd.
        Task* task = my_task();
        if (task && task->cap) {
          bump(task->cap->sparks.gcd);
          rt.sparks_given_back_unsettled.fetch_sub(1, std::memory_order_relaxed);
        }
      }
      return;
    }
    if (st == spark_base::stolen) {  // running elsewhere, on our captures: wait
      wait_stolen(s, /*interruptible=*/false);
      continue;  // done, or given back
    }
    Task* task = my_task();
    if (!task || !task->cap) return;  // runtime gone: the pool went with it
    if (s->pool->cap != task->cap) {
      migrate_current_to(s->pool->cap);
      continue;
    }
    remove_spark(s->pool, s);
    bump(s->pool->gcd);
    s->state.store(spark_base::done, std::memory_order_relaxed);
    return;
  }
}

}  // namespace capstan::detail