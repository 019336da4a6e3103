// ticker.cpp - see ticker.hpp.
//
// Note [Stopping the ticker]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// An idle runtime must cost no CPU, so after two consecutive ticks with every
// capability idle the ticker parks on rt.ticker_parked (GHC stops its ticker
// when the runtime is idle, too) - but not on a tick that suspected or
// broke a deadlock (see loop()).  Hand-shake with a capability leaving idle():
//   ticker: ticker_parked = 1 (seq_cst); if n_idle != n_caps: resume;
//           else futex_wait(ticker_parked, 1)
//   cap:    n_idle -= 1 (seq_cst RMW); if ticker_parked: ticker_parked = 0;
//           futex_wake
// All four accesses are seq_cst, so either the ticker sees the busy
// capability or the capability sees the parked flag; FUTEX_WAIT re-checks
// the word, so a wake between the check and the wait is not lost.  Losing a
// tick would only delay a timeslice, but we do not lose it.  While deadlock
// detection stands down for an outside OS thread, the parked ticker also
// wakes on a timer to look again (deadlock_recheck), still parked: the
// hand-shake is unchanged, and a capability that leaves idle meanwhile
// ends the park as before.
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
  return c->hold.load(std::memory_order_seq_cst) == Hold::free &&
         (c->run_queue.size() != 0 || c->inbox.nonempty_seq_cst() || c->sparks.size() != 0);
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
    // Not parked on a tick that broke a deadlock: the threads it woke are
    // only in inboxes yet.  Parking there left the ticker parked while
    // they ran and deadlocked again, so the second deadlock was never
    // found (Async.LeavingAScopeWhoseChildIsDeadlockedUnderUninterruptibleMask,
    // two deadlocks in a row: about one run in three under ThreadSanitizer
    // at -N4; the ticker sat in the untimed wait below).  Which hand-over
    // missed the hand-shake of Note [Stopping the ticker] was not found;
    // ticking on costs one tick, after which the ticker parks as usual.
    if (idle_ticks >= 2 && dl != DeadlockTick::suspected && dl != DeadlockTick::broken &&
        !rt.shutting_down.load(std::memory_order_relaxed)) {
      rt.ticker_parked.store(1, std::memory_order_seq_cst);
      if (rt.n_idle.load(std::memory_order_seq_cst) == rt.n_caps) {
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
