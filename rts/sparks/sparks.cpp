// sparks.cpp - spark threads, and the slow halves of spark<R>::get and
// ~spark (the inline halves are in lib/include/capstan/spark.hpp).  The
// pools and stealing are in sparks/pool.cpp: Note [Spark pools].
#include "sparks/sparks.hpp"

#include <exception>
#include <new>

#include "capstan/errors.hpp"
#include "primitives/spinlock.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"
#include "task/green_thread.hpp"

namespace capstan::rts {

using detail::spark_base;
using detail::spark_pool;

namespace {

// Note [The spark lock]
// ~~~~~~~~~~~~~~~~~~~~~
// A spark's lock is held for a few instructions (complete()), or by a
// maker from wait_stolen() until it is off its stack - released by the
// context that lands after its switch, on the same OS thread, before
// anything else runs there.  No green thread is ever switched out *while*
// the lock is held and then left waiting in a run queue (there is no safe
// point in between), so a waiter never waits for a green thread to be
// scheduled.  It may wait for an OS thread the kernel preempted, though: so
// it spins briefly (the common case, a few instructions) and then gives the
// OS thread up with sched_yield() between attempts instead of burning its
// timeslice against a descheduled holder (spin_lock, primitives/spinlock.hpp).
void lock_spark(spark_base* s) { spin_lock(s->lock); }

// Note [Completing a stolen spark]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The maker may read `done` without any lock (get()'s and ~spark's quick
// check) and then free the spark at once, so the thief's store of `done` must
// be its last touch of the spark - unless the maker is waiting, in which case
// the maker cannot run until the thief wakes it.  The state word says which:
//   maker:  lock; waiter = me; CAS stolen -> stolen_waiting; park, and the
//           lock is released once the maker is off its stack (as for MVars);
//           if the CAS fails the spark is done: unlock and go on.
//   thief:  prev = exchange(done) (acq_rel).  prev == stolen: nobody waits,
//           and the spark is never touched again.  prev == stolen_waiting:
//           read waiter, take the lock (it is free once the maker is off
//           its stack: no early wake-up), release it, wake the maker.
// The exchange and the CAS are ordered on the same word, so exactly one of
// "the thief sees a waiter" and "the maker sees done" happens.
// Checked by models/spark_steal.pml (docs/models.md).
constexpr unsigned kStolenWaiting = spark_base::stolen_waiting;

// complete publishes a stolen spark's result and wakes its maker if it waits.
void complete(spark_base* s) {
  unsigned prev = s->state.exchange(spark_base::done, std::memory_order_acq_rel);
  if (prev != kStolenWaiting) return;  // the spark may be gone already
  Thread* waiter = s->waiter;
  lock_spark(s);  // free once the maker has parked
  s->lock.store(false, std::memory_order_release);
  wake_home(waiter);  // back where its other sparks are
}

// wait_stolen parks the calling maker until the spark thread completes s.
void wait_stolen(spark_base* s) {
  Task* task = my_task();
  Thread* cur = task->cap->current;
  lock_spark(s);
  s->waiter = cur;
  unsigned expected = spark_base::stolen;
  if (!s->state.compare_exchange_strong(expected, kStolenWaiting, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
    s->lock.store(false, std::memory_order_release);  // already done
    return;
  }
  cur->why = WhyBlocked::on_spark;
  park_current(task, cur, &s->lock);  // unlocked once we are off our stack
}

// cancel settles a stolen spark that will never run (shutdown).
void cancel(Capability* cap, spark_base* s) {
  s->cancelled = true;
  detail::bump(cap->sparks.gcd);
  complete(s);
}

struct SparkThreadClosure {
  spark_base* first;
};

void spark_thread_invoke(void* p) {
  spark_base* s = static_cast<SparkThreadClosure*>(p)->first;
  while (s) {
    if (rt.shutting_down.load(std::memory_order_relaxed)) {
      // Nothing runs after shutdown: settle what we hold, unrun.
      Capability* cap = my_task()->cap;
      cancel(cap, s);
      while (cap->n_stolen_sparks) cancel(cap, cap->stolen_sparks[--cap->n_stolen_sparks]);
      return;
    }
    my_task()->cap->sparks_converted.add();
    s->run(s);  // catches the closure's exceptions into the spark
    complete(s);
    Capability* cap = my_task()->cap;
    poll_spark_requests(cap);  // thieves get our oldest sparks between runs
    // Sparks are speculative: ordinary threads come first (GHC's findSpark
    // finds nothing while the run queue is non-empty).  A maker woken by
    // this spark, say, runs before we take the next one.
    if (!cap->run_queue.empty() || cap->inbox.maybe_nonempty()) {
      yield_current();
      cap = my_task()->cap;
    }
    s = find_spark(cap);
  }
}
void spark_thread_destroy(void*) noexcept {}

}  // namespace

constinit const detail::closure_ops spark_thread_ops{&spark_thread_invoke, &spark_thread_destroy};

}  // namespace capstan::rts

namespace capstan::detail {

using namespace capstan::rts;

void spark_cancelled() { throw thread_killed{}; }

void spark_force_slow(spark_base* s) {
  for (;;) {
    unsigned st = s->state.load(std::memory_order_acquire);
    if (st == spark_base::done) return;
    if (st == spark_base::stolen) {
      wait_stolen(s);
      return;
    }
    Task* task = require_green_thread("capstan::spark::get");
    if (st == spark_base::unpooled) {  // overflowed: never in a pool
      s->state.store(spark_base::taken, std::memory_order_relaxed);
      s->run(s);
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
    s->run(s);
    s->state.store(spark_base::done, std::memory_order_relaxed);
    return;
  }
}

void spark_discard_slow(spark_base* s) noexcept {
  for (;;) {
    unsigned st = s->state.load(std::memory_order_acquire);
    if (st == spark_base::done || st == spark_base::unpooled) return;
    if (st == spark_base::stolen) {  // running elsewhere, on our captures: wait
      wait_stolen(s);
      return;
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