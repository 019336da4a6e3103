// pool.cpp - spark pools and stealing by request (GHC's Sparks.c and the
// pool half of its findSpark).  Spark threads and get() are in sparks.cpp.
//
// Note [Spark pools]
// ~~~~~~~~~~~~~~~~~~
// GHC keeps each capability's sparks in a Chase-Lev deque: the owner pushes
// and pops at one end, idle capabilities steal the oldest at the other with
// a CAS.  The owner's pop then needs a store-load fence, and here a fence or
// a locked instruction costs 2-10 ns - as much as the rest of a fine-grained
// spark's life.  capstan's pool is owner-private instead (Acar, Chargueraud
// and Rainey, "Scheduling parallel programs by work stealing with private
// deques", PPoPP 2013): only the Task running the capability touches
// slots/top/bottom, with plain loads and stores, so par() and a get() that
// finds its own spark on top are a handful of instructions and no atomics.
//
// An idle capability does not steal; it *asks*: it CASes its own address
// into the victim's `request` word and spins on its own `steal_box`.  The
// owner polls `request` (one relaxed load) at its poll points - every par(),
// every scheduling decision, every slow get(), between a spark thread's
// sparks, every idle-loop turn - and answers with its oldest spark plus up
// to a quarter of the rest (a batch: the thief keeps the extra ones in its
// private backlog), which it removes from its pool and marks stolen, or
// with "none".  An early request (its address with the low bit set, Note
// [Asking before the sparks exist]) is answered only once the pool holds a
// spark: the poll points leave it pending until then.  A thief that waits
// too long withdraws its request with a CAS; if that CAS fails the owner
// has already taken the request and will answer, so the thief waits for
// the answer.  Memory orderings:
//  * request CAS (thief, acq_rel) / exchange (owner, acq_rel): exactly one
//    of "owner answers" and "thief withdraws" wins.
//  * steal_box store (owner, release) / load (thief, acquire): the spark's
//    fields (closure, state = stolen) are visible to the thief.
//  * completion: the spark thread exchanges state to done (acq_rel); the
//    maker reads it with acquire, or waits: it CASes stolen ->
//    stolen_waiting, publishing a gate on its stack (an mvar_core and a
//    flag), and parks there as on an mvar, interruptibly; a spark thread
//    that sees stolen_waiting serves the gate under its lock, so the
//    wake-up cannot be lost or come early, and an interrupted maker
//    withdraws with a CAS back to stolen before the gate dies (Note
//    [Completing a stolen spark] in sparks/sparks.cpp).
// Rejected: Chase-Lev (a fence per owner pop, measured above); a lock per
// pool (a locked instruction per par); heartbeat promotion (Acar et al.,
// PLDI 2018) - needs a timer interrupt to promote, which C++ cannot take at
// arbitrary instructions; polling at par() gives the same effect here.
//
// The hand-over of a finished stolen spark: Note [Completing a stolen spark]
// in sparks/sparks.cpp.
// Checked by models/spark_steal.pml (docs/models.md).
//
// Accounting, exactly as GHC's +RTS -s SPARKS line:
//   created    pushed into a pool
//   overflowed pool full at par(): dropped, get() runs it inline
//   dud        already evaluated when sparked: a C++ closure never is, so 0
//   converted  run by a spark thread (stolen, or taken from the own pool
//              by the idle capability)
//   fizzled    found evaluated: its maker's get() ran it itself first (or
//              after a spark thread that never started gave it back)
//   GC'd       discarded unevaluated (spark destroyed unforced, or left in
//              a pool or a capability's stolen backlog at shutdown)
// created == converted + fizzled + GC'd + (still in pools), always; the
// summary's total is created + overflowed + dud.
#include "sparks/pool.hpp"

#include <sched.h>
#include <sys/mman.h>

#include <new>

#include "capstan/errors.hpp"
#include "primitives/clock.hpp"
#include "primitives/spin.hpp"
#include "runtime/runtime.hpp"

namespace capstan::detail {
constinit thread_local capability_here tl_here;
std::atomic<unsigned> g_spark_sleepers{0};

__attribute__((noinline)) spark_pool* current_spark_pool() noexcept {
  asm volatile("" ::: "memory");  // as my_task(): never treated as pure
  return tl_here.pool;
}
}

namespace capstan::rts {

using detail::spark_base;
using detail::spark_pool;

namespace {

// "None" answer to a steal request, distinct from "not answered yet" (null).
spark_base* const kNoSpark = reinterpret_cast<spark_base*>(std::uintptr_t{1});

// How long a thief waits for an answer before withdrawing its request.  The
// owner answers at its next poll point (a par(), a scheduling decision), so
// this bounds how long a sequential stretch between pars may be and still
// be split: a thief has nothing better to do meanwhile, and it gives up at
// once if work arrives in its inbox.
constexpr std::int64_t kStealWaitNs = 2'000'000;
// How long a hunter waits on a busy capability's empty pool (Note [Asking
// before the sparks exist]): one kLookGapNs of the idle loop, so its watch
// for stalled capabilities is not held up.
constexpr std::int64_t kEarlyAskNs = 20'000;

// take_oldest removes the oldest live spark of p (owner only), marked stolen.
spark_base* take_oldest(spark_pool* p) {
  std::uint64_t b = p->bottom.load(std::memory_order_relaxed);
  std::uint64_t t = p->top.load(std::memory_order_relaxed);
  spark_base* s = nullptr;
  while (b < t && !s) s = p->slots[b++ & p->mask];
  p->bottom.store(b, std::memory_order_relaxed);
  if (s) s->state.store(spark_base::stolen, std::memory_order_relaxed);
  return s;
}

// take_batch keeps the extra sparks of an answer in our backlog.
spark_base* take_batch(Capability* me, spark_base* first) {
  for (unsigned i = 0; i < me->steal_batch_n; ++i) me->stolen_sparks[me->n_stolen_sparks++] = me->steal_batch[i];
  me->steal_batch_n = 0;
  return first;
}

// ask sends a steal request to victim v and waits for the answer: up to
// kStealWaitNs, or kEarlyAskNs for an early request (Note [Asking before
// the sparks exist]).
spark_base* ask(Capability* me, Capability* v, bool early) {
  me->steal_box.store(nullptr, std::memory_order_relaxed);
  Capability* expected = nullptr;
  Capability* req = early ? early_request(me) : me;
  if (!v->sparks.request.compare_exchange_strong(expected, req, std::memory_order_acq_rel,
                                                 std::memory_order_relaxed))
    return nullptr;  // someone else is asking v
  // An early request counts as an attempt only once answered with a spark
  // (find_spark): a hunt posts one every kEarlyAskNs, and +RTS -s's
  // "n of m steal requests" would count the hunt's microseconds.
  if (!early) me->steal_attempts.add();
  std::int64_t deadline = now_ns() + (early ? kEarlyAskNs : kStealWaitNs);
  for (unsigned i = 1;; ++i) {
    spark_base* s = me->steal_box.load(std::memory_order_acquire);
    if (s) return s == kNoSpark ? nullptr : take_batch(me, s);
    poll_spark_requests(me);  // two thieves asking each other must not stall
    // The owner's OS thread may be waiting for ours to leave the CPU before
    // it can answer (more capabilities than CPUs, or the kernel put both on
    // one CPU): give it the CPU (Note [Yielding the CPU while spinning] in
    // schedule/idle.cpp).  Not an early request's wait: its answer waits
    // for a par(), not for our CPU, and the idle loop yields once per ask.
    if ((i & 63) == 0 && !early) sched_yield();
    // Threads sent to us, or the runtime stopping, end the wait within 8
    // turns (a hunt spends most of its spin here: Note [Asking before the
    // sparks exist]); the clock is read every 64.
    if ((i & 7) == 0 &&
        (me->inbox.maybe_nonempty() || rt.stop.load(std::memory_order_relaxed) ||
         ((i & 63) == 0 && now_ns() > deadline))) {
      expected = req;
      if (v->sparks.request.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel,
                                                    std::memory_order_relaxed))
        return nullptr;  // withdrawn before the owner saw it
      // The owner took the request: its answer is on the way.
      while (!(s = me->steal_box.load(std::memory_order_acquire))) cpu_relax();
      return s == kNoSpark ? nullptr : take_batch(me, s);
    }
    cpu_relax();
  }
}

}  // namespace

// Note [A wanted spark does not wait behind its thief]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thief answered with a batch runs the first spark at once and keeps the
// rest in its backlog (take_batch), each marked stolen: its maker's get()
// waits for the thief (wait_stolen) instead of running it.  The backlog
// runs when the spark thread finishes its spark, or when the capability
// goes idle (Note [A backlog of stolen sparks is not speculative] in
// schedule/idle.cpp).  But a spark that keeps its thread busy - computing,
// or yielding in a loop until its maker has forced a later spark - held
// every spark behind it, its maker's included: the maker waited as long
// as the spark ran, and for ever when the spark waited for the maker (a
// hang at every -N >= 2, found by an adversarial test; GHC's sparks
// never wait so, and spark.hpp promises get() runs a spark here unless an
// idle capability took it).  Taking the spark back would be the direct
// fix, but the backlog is the thief's own array, and a maker that ran the
// spark and returned would leave a dangling pointer in it.  So the thief
// looks instead: at every yield of one of its threads (a timeslice's end
// included) while its backlog is not empty, each backlog spark whose maker
// waits at its gate (stolen_waiting, set by wait_stolen before it parks)
// gets a spark thread of its own, at once, and runs beside the busy one.
// The look costs the yield a relaxed load of the backlog's length and a
// branch: `switch 10000000 +RTS -N1` 11.32 -> 11.54 ns per switch (+2 %,
// interleaved, medians of 4); the scan only runs with a backlog (at most
// kStealBatch sparks, an acquire load each).  A maker that starts waiting
// after the look is seen at the next yield, within a timeslice.  Tested by
// Sparks.ALaterSparkIsNotHeldBehind* (tests/rts/sparks/spark_test.cpp).
void start_wanted_sparks(Capability* cap) {
  unsigned n = cap->n_stolen_sparks.load();
  for (unsigned i = 0; i < n;) {
    spark_base* s = cap->stolen_sparks[i];
    // The spark lives while it is in the backlog: its maker cannot leave
    // get() (or ~spark) until it completes.
    if (s->state.load(std::memory_order_acquire) == spark_base::stolen_waiting) {
      cap->stolen_sparks[i] = cap->stolen_sparks[--n];
      cap->n_stolen_sparks.store(n);
      start_spark_thread(cap, s);
    } else {
      ++i;
    }
  }
}

// trim_pool drops holes at both ends of p (owner only).
void trim_pool(spark_pool* p) {
  std::uint64_t b = p->bottom.load(std::memory_order_relaxed);
  std::uint64_t t = p->top.load(std::memory_order_relaxed);
  while (b < t && p->slots[b & p->mask] == nullptr) ++b;
  while (t > b && p->slots[(t - 1) & p->mask] == nullptr) --t;
  p->bottom.store(b, std::memory_order_relaxed);
  p->top.store(t, std::memory_order_relaxed);
}

// remove_spark removes a pending spark from its pool (owner only).  A spark taken
// out of the middle leaves a hole; holes at either end are dropped at once,
// so sparks forced oldest-first (a loop of get()s) leave none behind.
void remove_spark(spark_pool* p, spark_base* s) {
  std::uint64_t t = p->top.load(std::memory_order_relaxed);
  if (s->index + 1 == t) {
    p->top.store(t - 1, std::memory_order_relaxed);
  } else {
    p->slots[s->index & p->mask] = nullptr;  // a hole: skipped by take_oldest
  }
  trim_pool(p);
}

void spark_pool_init(Capability* cap, std::size_t capacity) {
  std::size_t n = 1;
  while (n < capacity) n <<= 1;
  spark_pool& p = cap->sparks;
  // mmap, not new[](): the ring comes as zero pages the kernel provides
  // when first touched, so only the slots a program reaches cost memory
  // (+RTS -e may ask for 2^24 slots a capability; zero-filling them made
  // 128 MiB resident each, whether or not a spark was ever made).  Not
  // calloc either: with MALLOC_PERTURB_ set, glibc zero-fills that too.
  void* ring = ::mmap(nullptr, n * sizeof(spark_base*), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring == MAP_FAILED) throw std::bad_alloc();
  p.slots = static_cast<spark_base**>(ring);
  p.mask = n - 1;
  p.top.store(0);
  p.bottom.store(0);
  p.request.store(nullptr);
  p.cap = cap;
}

void spark_pool_release(Capability* cap) noexcept {
  spark_pool& p = cap->sparks;
  // Sparks left behind (their makers were abandoned) never run: GC'd -
  // those in the pool and those stolen into its backlog, not yet run.
  for (std::uint64_t i = p.bottom.load(); i < p.top.load(); ++i)
    if (p.slots[i & p.mask]) detail::bump(p.gcd);
  for (; cap->n_stolen_sparks; --cap->n_stolen_sparks) detail::bump(p.gcd);
  if (p.slots) ::munmap(p.slots, (p.mask + 1) * sizeof(spark_base*));
  p.slots = nullptr;
}

// Note [Asking before the sparks exist]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program that makes its sparks in rounds (heat: 16 strips a step, then
// a barrier) leaves the other capability idle between rounds.  Asking only
// pools that hold sparks, the idle one saw a round's sparks at its next
// look (every 256 turns of its spin), and its request was answered at the
// maker's next poll point - after the maker had run the first strip
// itself: in heat 512 400 at -N2 the idle capability began its first
// strip of a step a median 15-28 us after the step began (now 0.3-0.6
// us), against a step of about 190 us.
// So a hunting capability (the idle loop, never a spark thread) whose
// ordinary asks got nothing posts an *early* request on the pool of
// another capability that has made sparks before and is not idle, or has
// a thread in its inbox (at a round's end the maker is often just being
// woken there, its capability still marked idle): its Capability* with
// the low bit set (early_request, pool.hpp).  A program that makes no
// sparks never sees an early request: hog at -N2 (threads stuck behind a
// loop with no safe point) took 1.45 ms instead of 1.25 when its idle
// capability asked the looping one, its watch for the stall put off by
// each 20 us ask.
// Poll points leave an early request pending while the pool is empty
// (poll_spark_requests), so it is answered by the owner's next par(),
// which polls after its push (spark<T>::push), with the spark just made.
// The thief waits kEarlyAskNs for it (threads sent to it end the wait
// within 8 turns), then withdraws as any thief does, and posts it again at
// once (schedule/idle.cpp): an early request costs the victim a load and a
// size test at its poll points, and an answer only if the pool holds
// nothing but holes (size() counts them; the answer is "none").
// The hand-shake is the ordinary one: an owner that leaves a request
// pending is an owner between poll points, and the withdrawal CAS against
// the owner's exchange decides, as always, whether the answer comes.  So a
// poll point must leave an early request alone, never clear it unanswered:
// the thief's CAS would then fail and it would wait for an answer that
// never comes (models/spark_steal.pml posts early requests, and its
// BROKEN_EARLY variant clears one).  Unanswered early requests are not
// counted as steal attempts (+RTS -s).  A capability whose hunt finds
// nothing still sleeps after kSpinNs (schedule/idle.cpp).
spark_base* find_spark(Capability* cap, bool* asked_early) {
  if (cap->n_stolen_sparks) return cap->stolen_sparks[--cap->n_stolen_sparks];  // ours already (stolen)
  if (rt.shutting_down.load(std::memory_order_relaxed)) return nullptr;
  if (spark_base* s = take_oldest(&cap->sparks)) return s;
  if (rt.n_caps == 1) return nullptr;
  // Random victim order (CMU report: fixed orders pile thieves onto the
  // same victim); only victims whose pool looks non-empty are asked, then
  // (a hunt) one early request.
  cap->steal_seed = cap->steal_seed * 6364136223846793005ull + 1442695040888963407ull;
  unsigned start = static_cast<unsigned>(cap->steal_seed >> 33) % rt.n_caps;
  for (unsigned i = 0; i < rt.n_caps; ++i) {
    Capability* v = rt.caps[(start + i) % rt.n_caps];
    if (v == cap || v->sparks.size() == 0) continue;
    if (spark_base* s = ask(cap, v, /*early=*/false)) {
      cap->steals.add();
      return s;
    }
  }
  if (!asked_early) return nullptr;
  // See Note [Asking before the sparks exist]: a capability that has made
  // sparks and runs a thread, or is about to (one was just sent to it).
  for (unsigned i = 0; i < rt.n_caps; ++i) {
    Capability* v = rt.caps[(start + i) % rt.n_caps];
    if (v == cap || v->sparks.created.load(std::memory_order_relaxed) == 0 ||
        (v->idle.load(std::memory_order_relaxed) && !v->inbox.maybe_nonempty()))
      continue;
    if (v->sparks.request.load(std::memory_order_relaxed)) continue;  // someone else is asking v
    *asked_early = true;
    if (spark_base* s = ask(cap, v, /*early=*/true)) {
      cap->steal_attempts.add();
      cap->steals.add();
      return s;
    }
    return nullptr;  // one early ask per look
  }
  return nullptr;
}

}  // namespace capstan::rts

namespace capstan::detail {

using namespace capstan::rts;

// Note [Waking capabilities for sparks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A spark made while some capability sleeps wakes exactly one sleeper - the
// first whose spark_wake flag it manages to set - and only if none is
// already on its way (a set flag), so a burst of par() wakes one capability,
// not a herd.  The woken capability clears its flag after each park in
// idle(), when it wakes;
// if it finds more sparks than it can run, its own par() calls and the next
// pushes wake the next sleeper.  Parker::unpark is sticky, so a sleeper that
// has not reached its futex yet still wakes.
//
// The wake-up can be missed, on purpose.  par() reads g_spark_sleepers
// with a relaxed load right after its plain (relaxed) store of `top`; a
// capability going to sleep increments the count (seq_cst) and then
// re-checks only its *own* pool.  With no store-load fence on the par()
// side - one would cost as much as the rest of a fine-grained spark, see
// Note [Spark pools] - par() may read a count from before the increment
// while the sleeper cannot see the new spark: nobody is woken.  Two things
// make this harmless:
//  * progress never depends on it: the maker's get() runs an untaken spark
//    itself, so a missed wake-up costs parallelism, never a hang;
//  * the ticker (rts/runtime/ticker.cpp) sweeps every tick: while any
//    capability sleeps and some pool is non-empty it calls
//    spark_wake_sleeper, so a missed wake-up is repaired within one tick
//    (10 ms).  The ticker runs while any capability is busy (Note
//    [Stopping the ticker]), and a pool is non-empty only while its owner
//    is busy.
// And it wakes nobody while every CPU already has a busy or spinning
// capability (Note [Spinning only on a free CPU] in schedule/idle.cpp).
// Then par() backs off: with more capabilities than CPUs some sleep for
// good while two work, and every par() found sleepers, called here and
// read the shared idle and spinning counts for nothing (2 % of all samples
// of `parfib 34 2 +RTS -N8` on two CPUs, none at -N2).  After a try that
// found no free CPU, the pool's next kWakeBackoff par()s skip the try (a
// decrement of an owner-private counter); a CPU freed meanwhile is seen
// kWakeBackoff sparks later, or by the ticker's sweep.
constexpr std::uint32_t kWakeBackoff = 64;

bool spark_wake_sleeper() noexcept {
  unsigned busy = rt.n_caps - rt.n_idle(std::memory_order_relaxed);
  if (busy + rt.n_spinning.load(std::memory_order_relaxed) >= rt.n_cpus) return false;
  wake_one_sleeper();
  return true;
}

void spark_wake_sleeper_for(spark_pool* p) noexcept {
  if (!spark_wake_sleeper()) p->wake_skip = kWakeBackoff;
}

}  // namespace capstan::detail

namespace capstan::rts {

void wake_one_sleeper() noexcept {
  for (Capability* c : rt.caps) {
    // acquire: pairs with the sleeper's store of `sleeping` (idle.cpp), so
    // the Task we unpark below - the one that stored it - is visible to us
    // as it was made (ThreadSanitizer caught the ticker unparking a Task
    // whose construction it had no happens-before edge with).
    if (c->hold.load(std::memory_order_acquire) != Hold::sleeping) continue;
    bool expected = false;
    if (c->spark_wake.load(std::memory_order_relaxed)) return;  // one is on its way
    if (c->spark_wake.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      c->running_task.load(std::memory_order_acquire)->parker.unpark();
      return;
    }
  }
}

}  // namespace capstan::rts

namespace capstan::detail {

void spark_outside_runtime() {
  throw usage_error(
      "capstan::par: called from an OS thread that is not running a green thread; call it "
      "from inside capstan::run (the main function or a thread it forked)");
}

bool spark_make_room(spark_pool* p) noexcept {
  // The fast pop in get() leaves holes below a popped top: drop them before
  // calling the pool full.
  trim_pool(p);
  return p->top.load(std::memory_order_relaxed) - p->bottom.load(std::memory_order_relaxed) <=
         p->mask;
}

void spark_overflow(spark_pool* p) noexcept { bump(p->overflowed); }

void spark_respond(spark_pool* p) {
  Capability* r = p->request.exchange(nullptr, std::memory_order_acq_rel);
  if (!r) return;  // withdrawn
  Capability* thief = requester(r);
  // Answer with the oldest spark, plus up to a quarter of the rest (at most
  // kStealBatch in all): one round trip per spark would leave a thief idle
  // while we run a long spark between two poll points.
  spark_base* first = take_oldest(p);
  unsigned n = 0;
  if (first) {
    std::uint64_t more = p->size() / 4;
    while (n < more && n < Capability::kStealBatch - 1) {
      spark_base* s = take_oldest(p);
      if (!s) break;
      thief->steal_batch[n++] = s;
    }
  }
  thief->steal_batch_n = n;
  thief->steal_box.store(first ? first : kNoSpark, std::memory_order_release);
}

}  // namespace capstan::detail
