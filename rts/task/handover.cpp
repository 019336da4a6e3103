// handover.cpp - moving capabilities between Tasks; spare Tasks.
//
// One verb family, GHC's: a Task *waits for* a capability
// (wait_for_capability), a holder *gives* it to a waiting Task
// (give_capability_to_task, give_capability_to_spare) or *releases* it
// (release_capability); anyone may *try to grab* a free one
// (try_grab_capability).  take_capability/drop_capability are the holder's
// own bookkeeping around each of these.
//
// Note [Handing over a capability]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A capability is held by at most one Task: the one that may touch its
// owner state (run queue, stacks, spark pool).  Capability::hold says how:
//   held     - running_task holds it and is awake;
//   sleeping - running_task holds it and is parked in idle();
//   free     - nobody holds it.
// Transitions:
//   held -> sleeping -> held   only by the holder (idle()); a sender that
//                              sees `sleeping` unparks running_task.
//   held -> free               by the holder: a safe call releasing it
//                              lazily, or a bound Task leaving.
//   free -> held               by a CAS, by anyone: the winner holds it.
//   held -> held (new Task)    by give_capability_to_task(): the holder hands it to a waiting
//                              Task (a spare, or the Task a bound thread
//                              needs) and stops touching it.
// Releasing to `free` is the Dekker hand-shake of Note [Sleeping
// capabilities] with `free` in the role of `sleeping`:
//   releaser: hold.exchange(free, seq_cst);  if inbox.head.load(seq_cst): try CAS free->held
//   sender:   inbox.head CAS (seq_cst);   if hold.load(seq_cst) == free: try CAS free->held
// In the total order of seq_cst operations either the releaser's load sees
// the push, or the sender's load sees `free`; both may try to claim, the
// CAS picks one, and the winner passes the capability to a spare Task
// (give_capability_to_spare) or - a returning safe call - runs the work itself.
// Work never reaches a free capability otherwise: its run queue and spark
// pool are checked empty before release, and only the holder fills them.
// So work sent to a capability is never stranded.  The two releases that
// leave work queued - a safe call's (Note [Deferred hand-off]) and a
// spare the OS refused (Note [No OS thread for a spare]) - are watched by
// the ticker, which hands the work on.
//
// give_capability_to_task() writes given_cap/given_thread, then `given` with release; the
// receiver waits in wait_for_capability for `given` with acquire, parking
// on its Parker in between.  Parker::unpark is sticky (Note [Sticky
// wake-up]), so a give that lands before the receiver parks is not lost,
// and the receiver re-checks `given` after every wake-up, so spurious
// unparks (a stale running_task read by a sender) are harmless.
//
// Rejected: a capability lock (GHC's cap->lock) taken by every Task that
// wants to look at it - the holder would take it on hot paths; here the
// holder touches only its own word, and only hand-overs pay.
// Checked by models/capability_handover.pml (docs/models.md).
#include "task/handover.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "capstan/spark.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "runtime/runtime.hpp"

namespace capstan::rts {

void take_capability(Task* task, Capability* cap) noexcept {
  task->cap = cap;
  task->last_cap = cap;
  // release: publishes the Task (its os_tid) to the hog warner's acquire
  // load, which may meet a Task made an instant ago by an in-call.
  cap->running_task.store(task, std::memory_order_release);
  cap->held_by_incall.store(task->kind == TaskKind::foreign, std::memory_order_relaxed);
  detail::tl_here = here_of(cap);
}

Capability* drop_capability(Task* task) noexcept {
  Capability* cap = task->cap;
  task->cap = nullptr;
  cap->current = nullptr;
  detail::tl_here = {};
  return cap;
}

void give_capability_to_task(Task* to, Capability* cap, Thread* first) noexcept {
  cap->running_task.store(to, std::memory_order_release);  // as in take_capability
  to->given_cap = cap;
  to->given_thread = first;
  to->given.store(true, std::memory_order_release);  // publishes cap's state and the two above
  to->parker.unpark();
}

bool wait_for_capability(Task* task) noexcept {
  while (!task->given.load(std::memory_order_acquire)) {
    if (rt.stop.load(std::memory_order_acquire)) return false;
    task->parker.park();
  }
  task->given.store(false, std::memory_order_relaxed);
  take_capability(task, task->given_cap);
  return true;
}

bool try_grab_capability(Capability* cap) noexcept {
  Hold h = Hold::free;
  // acquire: the releaser's writes to the capability (its release store,
  // or the seq_cst exchange of a hand-off).
  return cap->hold.load(std::memory_order_relaxed) == Hold::free &&
         cap->hold.compare_exchange_strong(h, Hold::held, std::memory_order_acq_rel,
                                           std::memory_order_relaxed);
}

bool become_spare(Task* task) noexcept {
  Capability* cap = task->last_cap;
  if (!cap) return false;
  cap->spare_lock.lock();
  if (cap->n_spares >= rt.opts.max_spare_tasks) {
    cap->spare_lock.unlock();
    return false;
  }
  task->next_spare = cap->spares;
  cap->spares = task;
  ++cap->n_spares;
  cap->spare_lock.unlock();
  return true;
}

namespace {

Task* pop_spare(Capability* cap) noexcept {
  cap->spare_lock.lock();
  Task* t = cap->spares;
  if (t) {
    cap->spares = t->next_spare;
    t->next_spare = nullptr;
    --cap->n_spares;
  }
  cap->spare_lock.unlock();
  return t;
}

}  // namespace

// Note [No OS thread for a spare]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A spare Task is started when work waits behind a safe call, a bound or
// in-call Task, or reaches a free capability, and no spare is asleep.  The
// OS may refuse the thread (RLIMIT_NPROC, a cgroup's pids.max, no memory
// for its stack).  Aborting would lose every thread of the program, and
// the giver cannot run the work itself: it is about to block in the OS,
// to wait for its own bound thread, or it is the ticker or a sender.  So:
//  1. A Task that exists already can take the capability: the first
//     runnable bound thread, in the inbox or the run queue, goes to its
//     Task with the capability, as release_capability does (a returning
//     bound safe call, an in-call, a woken fork_os thread; a bound Task
//     runs unbound threads too, Note [Bound threads]).  That may be the
//     giver itself - a bound caller back from its safe call that found the
//     capability held, pushed itself and notified: it waits for the
//     capability next, and finds it given.  (A Task whose own bound thread
//     is queued is never one that goes on without waiting: while it holds
//     the capability it would run that thread, and the one that leaves for
//     good - release_capability - has no thread left.)
//  2. Otherwise the capability is released to `free` with its work
//     queued, counted as one more deferred call, and the ticker watches it
//     as it watches a safe call that blocks (Note [Deferred hand-off] in
//     foreign/safe_call.cpp): every other poll (about every 100 us) while
//     the capability stays free with work, it grabs the capability and
//     comes back here: to a spare if one sleeps or can now be started,
//     else (refused again) to a bound thread's Task if one has become
//     runnable, else to the release again.
//  3. The release is the releaser's half of the hand-shake of Note
//     [Handing over a capability]: a push to the inbox that saw the
//     capability held is looked at again, so a bound thread arriving
//     meanwhile is not left to wait for the next poll.
// A returning unbound safe call or an entering in-call takes the free
// capability with the usual CAS and runs the work.  A free capability with
// queued threads is not resting, so deadlock detection stays quiet.  Once
// the runtime has stopped, nothing runs any more: the capability is
// released, and no thread is started (run() is waiting for its OS threads).
// The first refusal of a run is reported on stderr; statistics()
// counts them all in spare_starts_refused.  The cost is latency while the
// OS refuses threads; nothing is lost, and the run goes on at full
// strength once it gives them again.  Tested by
// tests/rts/task/spare_start_test.cpp (the refuse_os_threads knob), and
// checked by models/capability_handover.pml with an OS that refuses once
// and one that refuses for good (docs/models.md).
namespace {

void report_refused_spare(Capability* cap, const char* why) noexcept {
  rt.spare_starts_refused.add();
  if (rt.spare_refusal_reported.exchange(true, std::memory_order_relaxed)) return;
  static constexpr char kPrefix[] = "capstan: ";
  if (std::strncmp(why, kPrefix, sizeof kPrefix - 1) == 0) why += sizeof kPrefix - 1;
  // snprintf + write, not fprintf: this may run on a green thread's stack,
  // and an unbuffered stderr would put an 8 KiB buffer on it.
  char msg[320];
  int n = std::snprintf(msg, sizeof msg,
                        "capstan: the OS refused a thread to run capability %u's waiting work "
                        "(%s); the work waits, and the runtime retries about every 100 us\n",
                        cap->no, why);
  if (n > 0) {
    ssize_t w = ::write(2, msg, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof msg - 1));
    (void)w;
  }
}

// hand_to_bound gives cap, which we hold, to the Task of the first runnable
// bound thread; false if there is none.
bool hand_to_bound(Capability* cap) noexcept {
  drain_inbox(cap);
  Thread* b = cap->run_queue.take_bound();
  if (!b) return false;
  give_capability_to_task(b->bound_task, cap, b);  // Note [Bound threads]
  return true;
}

// strand: steps 1-3 of the Note, for a capability no spare could take.
void strand(Capability* cap) noexcept {
  for (int round = 0;; ++round) {
    if (hand_to_bound(cap)) return;
    // We hold cap, so we may write deferred_calls.  running_task keeps
    // naming the last Task given it (perhaps a retired, never-started one,
    // which is never freed before the run ends: a stale unpark of it is
    // harmless).
    cap->deferred_calls.store(cap->deferred_calls.load(std::memory_order_relaxed) + 1,
                              std::memory_order_relaxed);
    cap->hold.exchange(Hold::free, std::memory_order_seq_cst);  // an RMW: Note [Sleeping capabilities]
    // Step 3: a push that landed while we held it is looked at once more;
    // after that the ticker's polls take over.
    if (round == 1 || !cap->inbox.nonempty_seq_cst() || !try_grab_capability(cap)) break;
  }
  rt.ticker.watch_deferred_calls();
}

}  // namespace

void give_capability_to_spare(Capability* cap, OwnerCounter* handed) noexcept {
  if (Task* spare = pop_spare(cap)) {
    if (handed) handed->add();  // before the give: we stop owning cap's counters
    give_capability_to_task(spare, cap, nullptr);
    return;
  }
  if (rt.stop.load(std::memory_order_acquire)) [[unlikely]] {
    // See the Note: nothing runs after the stop, and no thread may start.
    cap->hold.exchange(Hold::free, std::memory_order_seq_cst);  // an RMW: Note [Sleeping capabilities]
    return;
  }
  if (handed) handed->add();  // before the give (see above); undone if refused
  try {
    Task* spare = new_task(TaskKind::worker);
    spare->last_cap = cap;
    // The new thread's wait_for_capability finds `given` already set.  If
    // the start fails the Task is retired unstarted, and reset_for_reuse
    // clears what this give wrote.
    give_capability_to_task(spare, cap, nullptr);
    start_os_thread(spare, rt.scheduler_loop);
    return;
  } catch (const std::exception& e) {
    report_refused_spare(cap, e.what());
  } catch (...) {
    report_refused_spare(cap, "unknown error");
  }
  if (handed) handed->undo();  // no thread started: we still own cap
  strand(cap);
}

void release_capability(Task* task) noexcept {
  Capability* cap = drop_capability(task);
  // A bound thread waiting in the inbox (another in-call, say) gets the
  // capability straight from us: one OS hand-off, not two via a spare.
  drain_inbox(cap);
  Thread* front = cap->run_queue.front();
  if (front && front->bound_task && front->bound_task != task) {
    cap->run_queue.pop_front();
    give_capability_to_task(front->bound_task, cap, front);  // Note [Bound threads]
    return;
  }
  if (has_work(cap)) {
    give_capability_to_spare(cap);
    return;
  }
  // See the Note: release, then look for work that raced with us.
  cap->hold.exchange(Hold::free, std::memory_order_seq_cst);  // an RMW: Note [Sleeping capabilities]
  if (cap->inbox.nonempty_seq_cst() && try_grab_capability(cap)) give_capability_to_spare(cap);
}

void notify_capability(Capability* cap) noexcept {
  // See Note [Sleeping capabilities] (schedule/idle.cpp) and Note [Handing
  // over a capability]: the sender's half of the hand-shakes (the inbox CAS
  // that precedes every call with work to report is seq_cst).
  switch (cap->hold.load(std::memory_order_seq_cst)) {
    case Hold::sleeping:
      // acquire: the Task we read is fully constructed.  A stale read (the
      // sleeper woke and handed over meanwhile) unparks a Task that
      // re-checks and parks again; the new holder sees the inbox itself.
      cap->running_task.load(std::memory_order_acquire)->parker.unpark();
      break;
    case Hold::free:
      if (try_grab_capability(cap)) give_capability_to_spare(cap);
      break;
    case Hold::held:
      break;
  }
}

}  // namespace capstan::rts
