// ticker.cpp - see ticker.hpp.
//
// Note [Stopping the ticker]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An idle runtime must cost no CPU, so after two consecutive ticks with every
// capability idle the ticker parks on rt.ticker_parked (GHC stops its ticker
// when the runtime is idle, too) - but not on a tick that suspected a
// deadlock: the next one confirms or clears the suspicion.
// Parking promises that nothing needs a tick until a capability leaves
// idle(): no slice runs to be expired, and the tick's other work -
// deadlock detection above all - judges a state that only a busy
// capability can change.  So the ticker parks only on a judgement of a
// state that still holds: every capability was idle when the tick began
// to look (e0, read before any_busy and deadlock_tick), and none has left
// idle() since.  rt.idle_word counts both, the idle capabilities in its
// low half and the exits from idle() in its high half.  Hand-shake with a
// capability leaving idle():
//   ticker: e0 = idle_word; judge the tick; ticker_parked = 1;
//           if idle_word != e0 or count(e0) != n_caps: resume;
//           else futex_wait(ticker_parked, 1)
//   cap:    idle_word += kIdleExit - 1 (one RMW: one fewer idle, one
//           more exit); if ticker_parked: ticker_parked = 0; futex_wake
// All accesses are seq_cst.  If the capability's RMW precedes the
// ticker's second load of idle_word in their single total order, that
// load sees the exit count moved (it only grows; wrapping back to e0
// takes 2^32 exits within one tick) and the ticker resumes; otherwise the
// capability's load of ticker_parked follows the ticker's store, sees 1,
// and wakes it.  FUTEX_WAIT re-checks the word, so a wake between the
// check and the wait is not lost.  A count of n_caps at e0 and no exit
// since means no capability ran in between.
// The count alone, which the ticker once checked, was not enough: a
// thread woken just after the judgement - by its timer, or by the deadlock
// that tick had just broken - could run, block for good and let its
// capability re-enter idle() before the check, which then read n_caps
// again; the ticker parked on a judgement ("a timer is pending", "no
// deadlock yet") that no longer held, nothing left idle() again to wake
// it, and the deadlock was never found.  The Async test of a deadlocked
// child cancelled under uninterruptible_mask hung so about one run in
// three under ThreadSanitizer at -N4 (two deadlocks in a row);
// Deadlock.FoundWhenTheLastThreadBlocksAsTheTickerParks widens the window
// to make it every run.  The exit count costs nothing: the RMW was there.
// While deadlock detection stands down for an outside OS thread, the
// parked ticker also wakes on a timer to look again (deadlock_recheck),
// still parked: the hand-shake is unchanged, and a capability that leaves
// idle meanwhile ends the park as before.
// Two kinds of judgement are not of a state that only a busy capability
// changes, and are handled apart:
//  * "not quiet" for a reason that ends inside idle() or off the
//    capabilities: a capability still looking for work in idle()
//    (Hold::held: Note [Idle is not asleep] in exception/deadlock.cpp) goes
//    to sleep without leaving it, a message queued to the IO thread (a
//    cancel) is drained without waking anyone, and an in-call (a
//    dump_threads from an outside thread) ends without one.  deadlock_tick
//    reports these as DeadlockTick::unsettled, and the ticker does not park
//    on them: it ticks on until the run is settled.  Parked on such a tick,
//    it had missed a deadlock whose last thread blocked just before the
//    tick, while its capability was still spinning (3 to 9 runs in 42 of
//    Deadlock.FoundWhenTheLastThreadBlocksJustBeforeATick);
//  * "a timer or fd wait is pending": its end normally wakes a thread,
//    which makes a capability leave idle(); but a time-out queued for a
//    thread blocked uninterruptibly, or a timer that outlived its wait,
//    wakes nobody.  So the IO thread, after each batch of wake-ups, calls
//    ticker_judgement_changed (schedule/idle.hpp): one more exit in
//    idle_word (the ticker's re-check sees it) and a wake-up of a parked
//    ticker - the capability's side of the hand-shake above, for the IO
//    thread (Deadlock.FoundWhenATimeoutEndsOnAnUninterruptibleWait).
#include "runtime/ticker.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "capstan/spark.hpp"
#include "exception/deadlock.hpp"
#include "mvar/event.hpp"
#include "primitives/fault_injection.hpp"
#include "primitives/parker.hpp"
#include "primitives/clock.hpp"
#include "runtime/runtime.hpp"
#include "schedule/hog_warning.hpp"
#include "schedule/idle.hpp"
#include "schedule/steal.hpp"
#include "stats/stats.hpp"
#include "task/handover.hpp"

namespace capstan::rts {

void Ticker::start(std::chrono::microseconds timeslice) {
  if (timeslice.count() == 0) {
    // -C0: every switch into a thread expires its slice at once (switch.hpp),
    // and the ticker still expires it every tick: a flag used up at a safe
    // point with nothing else to run must come back, or the thread is never
    // preempted again and its timeouts never expire.
    period_ = kTick;
    ticks_per_slice_ = 1;
  } else {
    period_ = std::min(timeslice, kTick);
    ticks_per_slice_ = static_cast<unsigned>(timeslice / period_);
  }
  quit_.store(0);
  if (fault_injection::should_fail(fault_injection::fail_ticker_start))
    throw std::system_error(EAGAIN, std::generic_category(),
                            "capstan: cannot start the ticker thread (fault injected by a test)");
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "capstan-tick");  // Note [Deadlock detection]
    loop();
  });
}

void Ticker::stop() {
  if (!thread_.joinable()) return;
  quit_.store(1, std::memory_order_seq_cst);
  wake_.store(1, std::memory_order_seq_cst);
  futex_wake(&wake_, 1);
  rt.ticker_parked.store(0, std::memory_order_seq_cst);
  futex_wake(&rt.ticker_parked, 1);
  thread_.join();
}

namespace {

// While deadlock detection stands down for an outside OS thread, the
// parked ticker looks again after these (Note [Deadlock detection]).
constexpr std::int64_t kFirstRecheckNs = 100'000'000;
constexpr std::int64_t kMaxRecheckNs = 400'000'000;

struct timespec to_timespec(std::int64_t ns) {
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

// Work that a spare Task could run on a free capability.  Read from the
// ticker without holding the capability: hints (relaxed counters, the
// inbox's head), confirmed by whoever takes the capability.
bool free_with_work(Capability* c) {
  // The backlog of stolen sparks counts: their makers wait in get(), and a
  // safe call that released the capability defers its hand-off for it
  // (has_work); unwatched, they waited for the whole call - for ever when
  // the call waited for one of those makers.
  return c->hold.load(std::memory_order_seq_cst) == Hold::free &&
         (c->run_queue.size() != 0 || c->inbox.nonempty_seq_cst() || c->sparks.size() != 0 ||
          c->n_stolen_sparks.load() != 0);
}

}  // namespace

// The hand-shake that keeps a deferred call from going unwatched (Note
// [Deferred hand-off]), all seq_cst:
//   caller: hold = free; if watching_ == 0: watching_ = 1, wake_ = 1, futex_wake
//   ticker: watching_ = 0; for each capability: if free_with_work: watching_ = 1
// Either the caller sees the ticker stop watching and wakes it, or the
// ticker, stopping, sees the released capability and keeps watching.
void Ticker::watch_deferred_calls() noexcept {
  if (watching_.load(std::memory_order_seq_cst)) return;
  watching_.store(1, std::memory_order_seq_cst);
  wake_.store(1, std::memory_order_seq_cst);
  futex_wake(&wake_, 1);
}

bool Ticker::retake_deferred() {
  if (seen_.size() != rt.n_caps) seen_.assign(rt.n_caps, 0);
  bool any = false;
  for (Capability* c : rt.caps) {
    std::uint32_t d = c->deferred_calls.load(std::memory_order_relaxed);
    bool waiting = free_with_work(c);
    // The same deferred call as a poll ago: it has lasted at least a
    // poll, so it blocks; give the waiting work a spare Task.
    if (waiting && d != 0 && d == seen_[c->no] && !rt.stop.load(std::memory_order_relaxed) &&
        try_grab_capability(c)) {
      give_capability_to_spare(c, &c->safe_call_handoffs);
      waiting = false;
    }
    seen_[c->no] = d;
    any = any || waiting;
  }
  return any;
}

void Ticker::nap(std::int64_t period_ns) {
  std::int64_t end = now_ns() + period_ns;
  for (;;) {
    if (quit_.load(std::memory_order_seq_cst)) return;
    std::int64_t left = end - now_ns();
    if (left <= 0) return;
    // Reset before looking at watching_: a watch_deferred_calls between the
    // two leaves wake_ set, and futex_wait returns at once.
    wake_.store(0, std::memory_order_seq_cst);
    bool watching = watching_.load(std::memory_order_seq_cst) != 0;
    std::int64_t poll = std::chrono::duration_cast<std::chrono::nanoseconds>(kRetakePoll).count();
    struct timespec ts = to_timespec(watching ? std::min(left, poll) : left);
    futex_wait(&wake_, 0, &ts);
    if (!watching) continue;
    if (retake_deferred()) {
      quiet_polls_ = 0;
    } else if (++quiet_polls_ >= kQuietPolls) {
      quiet_polls_ = 0;
      watching_.store(0, std::memory_order_seq_cst);
      for (Capability* c : rt.caps)
        if (free_with_work(c)) watching_.store(1, std::memory_order_seq_cst);
    }
  }
}

void Ticker::loop() {
  std::int64_t period_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(period_).count();
  int idle_ticks = 0;
  unsigned slice_ticks = 0;
  StallTicker stalls;
  HogWarner hogs;
  while (!quit_.load(std::memory_order_seq_cst)) {
    nap(period_ns);  // one period, or until stop()
    if (quit_.load(std::memory_order_seq_cst)) break;
    // Note [Deferred hand-off]: the backstop, should a watch ever be
    // missed - a call that has blocked for a whole tick.
    retake_deferred();
    rt.coarse_now_ns.store(now_ns(), std::memory_order_relaxed);
    sample_peaks();
    // Note [Shutdown]: the grace-period clock; held back for one tick while
    // the run looks stuck (Note [Blocked while unwinding]).
    if (rt.shutting_down.load(std::memory_order_relaxed) && rt.shutdown_events &&
        shutdown_tick() != DeadlockTick::suspected)
      rt.shutdown_events->notify();
    // A capability asleep while sparks wait elsewhere (a missed wake-up is
    // allowed on the par() fast path: Note [Waking capabilities for sparks])
    // is woken within one tick.
    if (detail::g_spark_sleepers.load(std::memory_order_relaxed) != 0) {
      for (Capability* c : rt.caps) {
        if (c->sparks.size() != 0) {
          detail::spark_wake_sleeper();
          break;
        }
      }
    }
    // Note [Stealing from a stalled capability]: the backstop for a stall
    // that began while every idle capability slept.
    stalls.tick();
    hogs.tick(std::chrono::duration_cast<std::chrono::nanoseconds>(period_).count());  // Note [Warning about a hog]
    // Note [Lazy release]: work that reached a free capability through the
    // narrow race window of a safe call's release is picked up here.
    for (Capability* c : rt.caps)
      if (c->hold.load(std::memory_order_seq_cst) == Hold::free && c->inbox.nonempty_seq_cst() &&
          !rt.stop.load(std::memory_order_relaxed) && try_grab_capability(c))
        give_capability_to_spare(c);
    bool expire = ticks_per_slice_ != 0 && ++slice_ticks >= ticks_per_slice_;
    if (expire) slice_ticks = 0;
    // Note [Stopping the ticker]: what this tick's judgement rests on.
    std::uint64_t idle_seen = rt.idle_word.load(std::memory_order_seq_cst);
    bool any_busy = false;
    for (Capability* c : rt.caps) {
      if (!resting(c)) {
        if (expire) request_context_switch(c);
        any_busy = true;
      }
    }
    idle_ticks = any_busy ? 0 : idle_ticks + 1;
    // Note [Deadlock detection] in exception/deadlock.cpp.
    DeadlockTick dl = DeadlockTick::none;
    if (any_busy) deadlock_reset();
    else dl = deadlock_tick();
    if (idle_ticks >= 2 && dl != DeadlockTick::suspected && dl != DeadlockTick::unsettled &&
        !rt.shutting_down.load(std::memory_order_relaxed)) {
      if (int us = fault_injection::ticker_park_delay_us.load(std::memory_order_relaxed)) [[unlikely]]
        std::this_thread::sleep_for(std::chrono::microseconds(us));
      rt.ticker_parked.store(1, std::memory_order_seq_cst);
      // Note [Stopping the ticker]: every capability idle when the tick
      // looked, and none has left idle() since.
      if (rt.idle_word.load(std::memory_order_seq_cst) == idle_seen &&
          Runtime::idle_count(idle_seen) == rt.n_caps) {
        rt.arena.release_warm();  // Note [Trimming when idle]
        // Stood down for an outside OS thread (Note [Deadlock detection]):
        // look again after kFirstRecheckNs, then at doubling intervals up
        // to kMaxRecheckNs, each look (a read of /proc/self/task) made from
        // here, still parked.  A look used to unpark the ticker for two
        // ticks first, three wake-ups every 120 ms: an idle run with an
        // outside thread (nofib_like/idle) spent 0.25-0.33 % of a CPU.
        std::int64_t recheck_ns = kFirstRecheckNs;
        while (rt.ticker_parked.load(std::memory_order_seq_cst) == 1 &&
               !quit_.load(std::memory_order_seq_cst)) {
          if (dl == DeadlockTick::stood_down) {
            struct timespec ts = to_timespec(recheck_ns);
            futex_wait(&rt.ticker_parked, 1, &ts);
            if (rt.ticker_parked.load(std::memory_order_seq_cst) != 1 ||
                quit_.load(std::memory_order_seq_cst))
              break;  // woken: a capability is busy again, or stop()
            dl = deadlock_recheck();
            if (dl != DeadlockTick::stood_down) break;  // acted (the outside thread left), or work
            recheck_ns = std::min(recheck_ns * 2, kMaxRecheckNs);
            continue;
          }
          futex_wait(&rt.ticker_parked, 1);
        }
      }
      rt.ticker_parked.store(0, std::memory_order_seq_cst);
      rt.coarse_now_ns.store(now_ns(), std::memory_order_relaxed);  // it may have slept long
      idle_ticks = 0;
    }
  }
}

}  // namespace capstan::rts
