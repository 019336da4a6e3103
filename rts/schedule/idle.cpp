// idle.cpp - what a capability does when it has nothing to run: look for
// sparks, spin, then sleep until work arrives.
//
// Note [Sleeping capabilities]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An idle capability first spins for about kSpinNs watching its inbox (a
// futex wake-up costs 5-24 us here, far more than most waits; a hunt's
// last early request may add up to kEarlyAskNs, sparks/pool.cpp), then
// sleeps.
// The hand-shake with a sender (notify_capability, task/handover.cpp) is
// Dekker's, with seq_cst operations only (no stand-alone fences, which
// ThreadSanitizer cannot model):
//   sleeper: hold.exchange(sleeping, seq_cst);  if inbox.head.load(seq_cst) == null: park()
//   sender:  inbox.head CAS (seq_cst);       if hold.load(seq_cst) == sleeping: unpark()
// All four operations are in the single total order S of seq_cst
// operations.  If the sleeper's load misses the push, it precedes the CAS in
// S, so the sleeper's earlier exchange precedes the sender's later load, which
// therefore sees `sleeping` and unparks.  Either the sleeper sees the new
// work and does not park, or the sender sees `sleeping` and unparks.
// Cost: the sleeper's exchange (an xchg on x86) is on the idle path
// only; the sender's CAS is locked anyway and its seq_cst load is a plain
// load on x86 and an ldar on ARMv8.  The Parker's sticky flag covers an
// unpark that lands between the check and the futex wait (Note [Sticky
// wake-up]).
// The stop flag is part of the re-check: a capability that went to sleep
// just as the runtime stopped would otherwise never leave.
// The sleeper's store is an exchange, and so is every `free` release of
// Note [Handing over a capability]: on x86 the same instruction (GCC
// makes a seq_cst store an xchg); on AArch64 the architecture orders a
// store-release before a later load-acquire (stlr, ldar), but qemu-user,
// which runs the AArch64 test suite on x86 hosts, did not: the wake-up was
// lost about every other run of MVarStress.WakingSleepingCapabilities...,
// and the thread dump showed a woken thread queued for a capability that
// slept.  A read-modify-write is emulated with a locked host instruction,
// which orders it.
// Checked by models/capability_sleep.pml (docs/models.md).
//
// Note [Spinning only on a free CPU]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Hunting for sparks pays only while a CPU would otherwise sit unused.
// With more capabilities than CPUs (+RTS -N8 on 2 cores, or two programs at
// once) an idle capability that asks for sparks, and keeps spinning while
// sparks wait elsewhere, takes its CPU from a busy one: parfib 38 20 took
// 36 ms at -N2, 42 ms at -N4 and 67 ms at -N8 on 2 cores, the hunters (and
// the thieves they became) taking turns with the workers.  So an idle
// capability hunts - asks for sparks, spins on while sparks wait - only
// while
//     busy capabilities + those already hunting < CPUs in our affinity mask
// (rt.n_cpus, read once at start; rt.n_spinning counts the hunters).  Go's
// scheduler has the same rule in another form (no more spinning Ms than
// busy Ps, and GOMAXPROCS defaults to the CPU count).  par() wakes a
// sleeper for sparks under the same rule (spark_wake_sleeper, Note [Waking
// capabilities for sparks]): sparks are speculative, and waking more
// capabilities than there are CPUs only makes the kernel time-slice them.
// The first kSpinNs of watching the inbox stay unconditional: threads sent
// to a capability are not speculative, and a futex wake-up costs 5-24 us.
// A first version that slept at once without a free CPU made shutdown's
// kill storm at -N4/-N8 (100,000 threads killed across the capabilities)
// pay a wake-up per kill (and, then, outlast shutdown's grace period).
// A hunter yields its CPU every 20 us (Note [Yielding the CPU while
// spinning]), so its spell costs a busy neighbour little.  Threads sent to a
// capability still wake it at once (notify_capability), and the sleep
// hand-shake above is unchanged.
// The counts are relaxed hints, read without a fence: a stale read lets one
// capability too many spin for one spell of kSpinNs, or sends one to sleep
// that the next par() or the ticker wakes.  Nothing waits on them, so no
// wake-up can be lost through them.  At -N1 and at -N2 on two CPUs the rule
// never stops a hunt (busy + hunting <= 1 < 2), so those rows cannot change.
//
// Note [Yielding the CPU while spinning]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A CPU being free does not mean the kernel uses it: it sometimes queues a
// spinning capability's OS thread on the CPU of a busy one and leaves both
// there for milliseconds while the other CPU idles.  In about one run in
// ten of nqueens 12 3 at -N2, capability 0 computed at under half speed
// (busy 15 ms for 5.5 ms of work) while capability 1 spun and asked for
// sparks next to it.  So a hunting spinner calls sched_yield() every
// kLookGapNs (20 us), and a thief waiting for an answer every 64 turns:
// when it shares its CPU the busy thread gets it back at once; when it does
// not, a yield costs a system call (well under a microsecond) per 20 us of
// spinning.  Once the spinner sleeps, its next wake-up places it on an idle
// CPU.  A spinner that only watches its inbox does not yield: in shutdown's
// kill storm at -N4 (threads sent to every capability at once) yielding
// spinners took 10 us per killed thread instead of 3-5.  One woken by
// wake_one_sleeper (for sparks, or to watch a busy capability: Note
// [Stealing from a stalled capability]) does, free CPU or not: it was
// called to look, not sent threads, and with more capabilities than CPUs
// its spin is taken from a busy one (threads001 at -N8, whose long queues
// call a watcher up to once a millisecond, lost 8 % without the yield).
#include "schedule/idle.hpp"

#include <sched.h>

#include <chrono>
#include <thread>

#include "schedule/steal.hpp"

#include "primitives/clock.hpp"
#include "primitives/fault_injection.hpp"
#include "primitives/parker.hpp"
#include "primitives/spin.hpp"
#include "runtime/runtime.hpp"
#include "sparks/pool.hpp"
#include "trace/trace.hpp"

namespace capstan::rts {

namespace {

constexpr std::int64_t kSpinNs = 50'000;
// Looking at the other capabilities reads cache lines their owners write on
// every operation; looking every 256 turns (a few microseconds) cost
// threads001 at -N2 several percent.  Three looks per spin suffice to see
// a stall last kJudgeNs (Note [Stealing from a stalled capability]).
constexpr std::int64_t kLookGapNs = 20'000;

// inbox_or_stop: may an idle capability stop idling?  Not has_work (which
// asks whether a capability may be released): an idle capability's run
// queue is empty and its sparks are looked for separately (try_sparks), so
// only threads sent to it, and the runtime stopping, end an idle period.
bool inbox_or_stop(Capability* cap) {
  return cap->inbox.maybe_nonempty() || rt.stop.load(std::memory_order_relaxed);
}

constexpr unsigned kSparkRounds = 20;

// may_spin: see Note [Spinning only on a free CPU].  The caller is idle and
// not yet counted as spinning.
bool may_spin() {
  unsigned busy = rt.n_caps - rt.n_idle(std::memory_order_relaxed);
  return busy + rt.n_spinning.load(std::memory_order_relaxed) < rt.n_cpus;
}

bool any_sparks() {
  for (Capability* c : rt.caps)
    if (c->sparks.size() != 0) return true;
  return false;
}

// try_sparks: an idle capability turns a spark into a spark thread (own
// pool first, then by asking others; Note [Spark pools]).  `asked`: it
// asked someone and got nothing, so the next turn asks again (an early
// request, which costs its victim no answer: Note [Asking before the
// sparks exist] in sparks/pool.cpp).
bool try_sparks(Capability* cap, bool* asked) {
  poll_spark_requests(cap);
  *asked = false;
  // A spark thread that can get no stack would end unstarted and give its
  // sparks back (Note [Running out of stacks] in storage/stack.cpp).  Not
  // while we hold stolen sparks: only a spark thread - or the one that
  // fails to start, giving them back - returns those to their makers.
  if (rt.arena.maybe_exhausted() && cap->stacks.pooled() == 0 && cap->n_stolen_sparks == 0 &&
      rt.arena.exhausted(now_ns())) [[unlikely]]
    return false;
  if (detail::spark_base* s = find_spark(cap, asked)) {
    if (int us = fault_injection::idle_spark_delay_us.load(std::memory_order_relaxed)) [[unlikely]]
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    start_spark_thread(cap, s);
    return true;
  }
  return false;
}

// exit_and_wake_ticker adds `delta` to idle_word (an exit from idle(),
// with or without one fewer idle capability) and wakes a parked ticker:
// the capability's side of Note [Stopping the ticker], all seq_cst.
void exit_and_wake_ticker(std::uint64_t delta) noexcept {
  rt.idle_word.fetch_add(delta, std::memory_order_seq_cst);
  if (rt.ticker_parked.load(std::memory_order_seq_cst)) {
    rt.ticker_parked.store(0, std::memory_order_seq_cst);
    futex_wake(&rt.ticker_parked, 1);
  }
}

}  // namespace

void idle(Task* task, Capability* cap) {
  rt.idle_word.fetch_add(1, std::memory_order_seq_cst);
  cap->idle.store(true, std::memory_order_relaxed);
  if (rt.tracing) [[unlikely]]
    trace_idle(cap, true);
  std::int64_t t0 = now_ns();
  bool found = false;
  bool watching = false;  // a stall was being judged when the last spin ended
  bool called = false;    // woken by wake_one_sleeper: for sparks, or to watch
  for (unsigned round = 0; !found; ++round) {
    // Note [A backlog of stolen sparks is not speculative]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // Sparks stolen in a batch wait in our backlog (n_stolen_sparks) for
    // the spark thread that runs the first; their makers are blocked in
    // get() until they run.  That thread normally drains the backlog, but
    // it is an ordinary unlocked thread: pushed to another capability
    // (push_work) or stolen from a stall, it drains that one's backlog
    // instead, and ours waits for our next hunt.  With more capabilities
    // than CPUs we hunt only on a free CPU (Note [Spinning only on a free
    // CPU]), and the sleep test below looks at the pool only: a capability
    // could sleep on its backlog, and every maker waiting for it with it -
    // for ever once nothing else runs, when deadlock detection raised
    // them.  So a backlog is run at once, free CPU or not, and no idle
    // capability sleeps holding one.
    if (cap->n_stolen_sparks != 0) {
      bool asked;
      if ((found = try_sparks(cap, &asked))) break;  // find_spark takes the backlog first
    }
    // Spin for kSpinNs watching the inbox, answering steal requests, and
    // looking for sparks (asking another capability every 256 turns: each
    // ask costs the victim a poll, so thieves back off; but a look that
    // posted an early request, which costs its victim no answer, is made
    // again at once when the request is withdrawn) and, every
    // kLookGapNs, for a stalled capability's threads (Note [Stealing from a
    // stalled capability]).
    // Sparks are looked for only with a free CPU (Note [Spinning only on a
    // free CPU]); the inbox is watched for kSpinNs regardless.
    bool hunt = watching || may_spin();
    if (hunt) rt.n_spinning.fetch_add(1, std::memory_order_relaxed);
    std::int64_t spin_start = now_ns();
    std::int64_t next_look = spin_start;
    StallLook look = StallLook::nothing;
    bool ask_again = false;
    for (unsigned i = 0; !found; ++i) {
      if (inbox_or_stop(cap)) {
        found = true;
        break;
      }
      bool timed = (i & 63) == 63;
      if (hunt && ((i & 255) == 0 || ask_again)) {
        if (try_sparks(cap, &ask_again)) {
          found = true;
          break;
        }
        // An ask waited (up to kEarlyAskNs): look at the clock now.
        timed = timed || ask_again;
      }
      if (timed) {
        std::int64_t now = now_ns();
        if (now >= next_look) {
          next_look = now + kLookGapNs;
          if ((look = look_for_stalls(cap)) == StallLook::stole) found = true;
          else if (hunt || called) sched_yield();  // Note [Yielding the CPU while spinning]
        }
        if (!found && now - spin_start > kSpinNs) break;
      } else {
        poll_spark_requests(cap);
        cpu_relax();
      }
    }
    if (hunt) rt.n_spinning.fetch_sub(1, std::memory_order_relaxed);
    if (found) break;
    // A stall being judged ends within kStallNs: keep spinning until then;
    // and a busy capability that just asked to be watched is (Note
    // [Stealing from a stalled capability]).
    // Threads wait there: this spin is not speculative, free CPU or not.
    watching = look == StallLook::watching || watch_requested(now_ns());
    if (watching) continue;
    // Sparks elsewhere whose owner has not answered yet: keep trying for a
    // while (bounded: kSparkRounds spins), then sleep anyway; the ticker
    // wakes a sleeper while sparks wait (Note [Waking capabilities for sparks]).
    if (hunt && round < kSparkRounds && any_sparks()) continue;
    if (round == 0) cap->stacks.trim_idle();  // Note [Trimming when idle]
    cap->hold.exchange(Hold::sleeping, std::memory_order_seq_cst);  // see the Note: an RMW
    if (cap->inbox.nonempty_seq_cst() || rt.stop.load(std::memory_order_seq_cst)) {
      cap->hold.store(Hold::held, std::memory_order_relaxed);
      break;
    }
    detail::g_spark_sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (cap->sparks.size() == 0 && !cap->spark_wake.load(std::memory_order_seq_cst)) {
      cap->sleeps.add();
      if (rt.tracing) [[unlikely]]
        trace_sleep(cap, true);
      task->parker.park();
      if (rt.tracing) [[unlikely]]
        trace_sleep(cap, false);
    }
    detail::g_spark_sleepers.fetch_sub(1, std::memory_order_seq_cst);
    cap->hold.store(Hold::held, std::memory_order_relaxed);
    called = cap->spark_wake.load(std::memory_order_relaxed);
    cap->spark_wake.store(false, std::memory_order_relaxed);
    found = inbox_or_stop(cap);  // else spin again: woken for sparks, or spuriously
  }
  cap->idle.store(false, std::memory_order_relaxed);
  // One fewer idle, one more exit, in one RMW (Runtime::idle_word); Note
  // [Stopping the ticker]: a busy capability needs the ticker back.
  exit_and_wake_ticker(Runtime::kIdleExit - 1);
  cap->idle_ns.add(static_cast<std::uint64_t>(now_ns() - t0));
  if (rt.tracing) [[unlikely]]
    trace_idle(cap, false);
}

void ticker_judgement_changed() noexcept {
  // As a capability leaving idle() (above), without the idle count: the
  // exit half moves, so a ticker between its judgement and its park
  // resumes; one already parked is woken.
  exit_and_wake_ticker(Runtime::kIdleExit);
}

}  // namespace capstan::rts
