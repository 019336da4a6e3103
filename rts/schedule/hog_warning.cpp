// hog_warning.cpp - the ticker names, once, a thread that has held its
// capability for longer than +RTS --warn-hog=<ms> (default 100 ms) without
// reaching a safe point while other threads waited for that capability.
//
// Note [Warning about a hog]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A loop with no runtime call in it never reaches a safe point, so the
// timeslice cannot take the capability back: the threads queued behind it
// wait (at -N1, for as long as it runs; at -N2 and up, until an idle
// capability takes them: Note [Stealing from a stalled capability]).  The
// fix is in the program - a yield_point() in the loop - so the runtime
// says so, as Go's race detector or GHC's -fno-omit-yields advice would.
// The ticker already wakes every tick; on each it reads, for each busy
// capability, its sched_epoch (one more per scheduling decision) and how
// many threads wait in its run queue and inbox.  A capability whose epoch
// has not moved for warn_hog while at least one thread waited is running a
// hog: its current thread (a racy read, Note [A thread dump is a
// snapshot]; the epoch re-read after it confirms the thread was running
// all along) is named on stderr with the advice, once per thread.
// No false alarms: a thread that reaches safe points gives the capability
// up within a timeslice of the ticker's request, so the limit is at least
// a timeslice and two ticks; and the stall must have been seen by as many
// ticks as the limit holds periods, so a ticker that was itself kept off
// the CPU for a while (which also delays the timeslice's end) blames no one.  Cost:
// nothing on the scheduler's paths; a few loads per capability per tick.
// Rejected: a check in the scheduler (it is exactly what does not run
// during a hog), and a timer per pick (a clock read on every switch).
// The runtime's own long loops are not the program's to fix: a latch,
// barrier or notify_all that releases 400,000 threads spends 190 ms in
// wake_list::wake_rest, and the warning used to tell the program to add a
// yield_point() it has no loop for.  A wake of kBulkWake (1024) chained
// threads or more sets the capability's bulk_wake until it ends; the
// warner restarts its clock while it is set, so only time spent after
// the wake, in the program's code, counts.
#include "schedule/hog_warning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "capability/capability.hpp"
#include "primitives/clock.hpp"
#include "runtime/runtime.hpp"
#include "thread/dump.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

void HogWarner::tick(std::int64_t period_ns) {
  auto limit_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(rt.opts.warn_hog).count();
  if (limit_ns == 0) return;
  auto slice_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(rt.opts.timeslice).count();
  limit_ns = std::max(limit_ns, slice_ns + 2 * period_ns);
  auto ticks_needed = static_cast<std::uint64_t>(std::max<std::int64_t>(2, limit_ns / period_ns));
  if (seen_.size() != rt.n_caps) seen_.assign(rt.n_caps, Seen{});
  std::int64_t now = now_ns();
  for (Capability* c : rt.caps) {
    Seen& s = seen_[c->no];
    // acquire: pairs with the owner's release increment, so the current
    // thread read below is at least as new as this decision.
    std::uint64_t epoch = c->sched_epoch.load(std::memory_order_acquire);
    // A wake of thousands of threads is the runtime's loop, not the
    // program's: its time does not count (see the Note).
    if (c->idle.load(std::memory_order_relaxed) || epoch != s.epoch || s.since_ns == 0 ||
        c->bulk_wake.load(std::memory_order_relaxed)) {
      s = Seen{epoch, now, 0, 0};
      continue;
    }
    ++s.ticks;
    std::uint64_t waiting = c->run_queue.size() + (c->inbox.maybe_nonempty() ? 1 : 0);
    if (waiting > s.most_waiting) s.most_waiting = waiting;
    if (s.most_waiting == 0 || now - s.since_ns < limit_ns || s.ticks < ticks_needed) continue;
    Thread* t = snap(c->current);
    if (!t) continue;
    std::uint64_t id = snap(t->id);
    if (c->sched_epoch.load(std::memory_order_acquire) != epoch) continue;  // it moved on
    if (!warned_.insert(id).second) continue;
    // Its label is read under its home's all_lock, and only while it is
    // still on that list (a thread that finished meanwhile may have been
    // recycled): a walk of the list, once per warning.
    std::string name = fmt::format("thread {}", id);
    Capability* home = snap(t->home);
    home->all_lock.lock();
    for (const Thread* x = home->all_head; x; x = x->all_next) {
      if (x == t) {
        if (x->id == id) name = thread_name(t);
        break;
      }
    }
    home->all_lock.unlock();
    fmt::print(stderr,
               "capstan: {} has held capability {} for {} ms without reaching a safe point while "
               "{} other thread{} waited for it; call capstan::yield_point() in its long loops "
               "(named once; +RTS --warn-hog=<ms> sets the limit, 0 silences it)\n",
               name, c->no, (now - s.since_ns) / 1'000'000, s.most_waiting,
               s.most_waiting == 1 ? "" : "s");
  }
}

}  // namespace capstan::rts
