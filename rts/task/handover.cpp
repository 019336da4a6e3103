// handover.cpp - moving capabilities between Tasks; spare Tasks.
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
//   held -> held (new Task)    by give(): the holder hands it to a waiting
//                              Task (a spare, or the Task a bound thread
//                              needs) and stops touching it.
// Releasing to `free` is the Dekker hand-shake of Note [Sleeping
// capabilities] with `free` in the role of `sleeping`:
//   releaser: hold.store(free, seq_cst);  if inbox.head.load(seq_cst): try CAS free->held
//   sender:   inbox.head CAS (seq_cst);   if hold.load(seq_cst) == free: try CAS free->held
// In the total order of seq_cst operations either the releaser's load sees
// the push, or the sender's load sees `free`; both may try to claim, the
// CAS picks one, and the winner passes the capability to a spare Task
// (release_to_spare) or - a returning safe call - runs the work itself.
// Work never reaches a free capability otherwise: its run queue and spark
// pool are checked empty before release, and only the holder fills them.
// So work sent to a capability is never stranded.
//
// give() writes handed_cap/handed_thread, then `handed` with release; the
// receiver waits in wait_for_capability for `handed` with acquire, parking
// on its Parker in between.  Parker::unpark is sticky (Note [Sticky
// wake-up]), so a give that lands before the receiver parks is not lost,
// and the receiver re-checks `handed` after every wake-up, so spurious
// unparks (a stale running_task read by a sender) are harmless.
//
// Rejected: a capability lock (GHC's cap->lock) taken by every Task that
// wants to look at it - the holder would take it on hot paths; here the
// holder touches only its own word, and only hand-overs pay.
#include "handover.hpp"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <thread>

#include "../runtime.hpp"
#include "../scheduler.hpp"
#include "overflow_handler.hpp"
#include "../sparks/sparks.hpp"

namespace capstan::rts {

void take_capability(Task* task, Capability* cap) noexcept {
  task->cap = cap;
  task->last_cap = cap;
  cap->running_task.store(task, std::memory_order_relaxed);
  detail::tl_spark_pool = &cap->sparks;
}

Capability* drop_capability(Task* task) noexcept {
  Capability* cap = task->cap;
  task->cap = nullptr;
  cap->current = nullptr;
  detail::tl_spark_pool = nullptr;
  return cap;
}

void give(Task* to, Capability* cap, Thread* first) noexcept {
  cap->running_task.store(to, std::memory_order_relaxed);
  to->handed_cap = cap;
  to->handed_thread = first;
  to->handed.store(true, std::memory_order_release);  // publishes cap's state and the two above
  to->parker.unpark();
}

bool wait_for_capability(Task* task) noexcept {
  while (!task->handed.load(std::memory_order_acquire)) {
    if (rt.stop.load(std::memory_order_acquire)) return false;
    task->parker.park();
  }
  task->handed.store(false, std::memory_order_relaxed);
  take_capability(task, task->handed_cap);
  return true;
}

bool try_claim(Capability* cap) noexcept {
  Hold h = Hold::free;
  // acquire: the releaser's writes to the capability (its seq_cst store).
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

void worker_body(Task* task) { schedule(task); }

}  // namespace

void release_to_spare(Capability* cap) noexcept {
  Task* spare = pop_spare(cap);
  if (!spare) {
    try {
      spare = new_task(TaskKind::worker);
      spare->last_cap = cap;
      // The new thread's wait_for_capability finds `handed` already set.
      give(spare, cap, nullptr);
      start_os_thread(spare, &worker_body);
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "capstan: cannot start an OS thread to run capability %u while its Task is "
                   "in a safe call: %s\n",
                   cap->no, e.what());
      std::abort();
    }
  }
  give(spare, cap, nullptr);
}

void release_capability(Task* task) noexcept {
  Capability* cap = drop_capability(task);
  // A bound thread waiting in the inbox (another in-call, say) gets the
  // capability straight from us: one OS hand-off, not two via a spare.
  drain_inbox_now(cap);
  Thread* front = cap->run_queue.front();
  if (front && front->bound_task && front->bound_task != task) {
    cap->run_queue.pop_front();
    give(front->bound_task, cap, front);  // Note [Bound threads]
    return;
  }
  if (!cap->run_queue.empty() || cap->inbox.maybe_nonempty() || cap->sparks.size() != 0 ||
      cap->backlog_n != 0 || cap->handoff) {
    release_to_spare(cap);
    return;
  }
  // See the Note: release, then look for work that raced with us.
  cap->hold.store(Hold::free, std::memory_order_seq_cst);
  if (cap->inbox.nonempty_seq_cst() && try_claim(cap)) release_to_spare(cap);
}

Task* new_task(TaskKind kind) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  Task* t;
  if (!rt.retired_tasks.empty()) {
    t = rt.retired_tasks.back();
    rt.retired_tasks.pop_back();
    t->cap = nullptr;
    t->sched_sp = nullptr;
    t->post = PostSwitch{};
    t->handed.store(false, std::memory_order_relaxed);
    t->handed_cap = nullptr;
    t->handed_thread = nullptr;
    t->last_cap = nullptr;
    t->next_spare = nullptr;
    t->bound_thread = nullptr;
    t->bound_done = false;
    t->pass_cap_to_spare = false;
  } else {
    rt.tasks.push_back(std::make_unique<Task>());
    t = rt.tasks.back().get();
    t->threads.attach(&rt.depot);
  }
  t->kind = kind;
  rt.tasks_created.fetch_add(1, std::memory_order_relaxed);
  return t;
}

namespace {

void retire(Task* t) {
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  rt.retired_tasks.push_back(t);
}

}  // namespace

void start_os_thread(Task* task, void (*body)(Task*)) {
  rt.os_threads.fetch_add(1, std::memory_order_relaxed);
  try {
    std::thread([task, body] {
      bind_task_to_this_os_thread(task);
      init_task_sanitizer_state(task);
      if (!rt.sanitizers) enter_signal_stack(task);
      body(task);
      if (!rt.sanitizers) leave_signal_stack(task);
      set_my_task(nullptr);
      retire(task);
      // Last: run() waits for this count to reach zero before it frees Tasks.
      if (rt.os_threads.fetch_sub(1, std::memory_order_acq_rel) == 1)
        futex_wake(&rt.os_threads, 1);
    }).detach();
  } catch (...) {
    rt.os_threads.fetch_sub(1, std::memory_order_relaxed);
    retire(task);
    throw;
  }
}

}  // namespace capstan::rts
