// scheduler.cpp - the scheduler loop and everything that moves a green thread
// between running, runnable, blocked and finished.
//
// Policy in one paragraph (GHC's Schedule.c, adapted):
// Each capability runs the threads of its own run queue; other capabilities
// and OS threads reach it only through its inbox.  A thread runs until it
// yields, blocks, finishes, or reaches a safe point after its timeslice
// expired; it is then requeued by the rules of Note [Requeue front or back]
// and the next thread is switched to *directly* (Note [Direct switching]).
// An idle capability spins briefly, then sleeps on its Task's futex until
// work arrives in its inbox (Note [Sleeping capabilities]).  Busy
// capabilities push surplus threads to idle ones (Note [Pushing work]);
// woken threads follow their waker (Note [Wake-up affinity]).
//
// Rejected alternatives:
//  * Every switch through a scheduler stack (GHC's StgRun returns to
//    schedule()): two switches per hand-off instead of one.
//  * Work stealing of runnable threads with a Chase-Lev run queue: every
//    owner pop then needs a store-load fence (~2.3 ns here), and stolen
//    threads break producer/consumer pairs apart.  Pushing keeps the run
//    queue owner-private and is measured in nofib_like (docs/benchmarks.md).
//  * One global run queue: a lock on every hand-off.
//
// Note [Requeue front or back]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where a thread goes when it stops running:
//   timeslice expired (ticker set kTimesliceExpired) -> back of the queue
//   yield()                                          -> back
//   woken after blocking                             -> back of its
//       capability's queue, through that capability's inbox if the waker
//       runs elsewhere (and see Note [Wake-up affinity])
//   new thread (fork_io)                             -> back, as GHC's
//       scheduleThread, so a forking loop cannot starve older threads
//   interrupted (kInterrupt: a stop-the-world request - today shutdown,
//       later a change of the number of capabilities) -> front: it stopped
//       for no fault of its own, so it keeps its place and its cache; in
//       practice it handles the interrupt and simply continues.
// kInterrupt is advisory (a plain store of the flag may clear it): whatever
// must not be lost has a flag of its own, e.g. rt.shutting_down.
// Back for fairness (round robin), front for anything that is not about
// fairness; the context-switch flag is cleared when the switch is actually
// made, not before a thread runs, so a tick is never lost (GHC #1984).
//
// Note [Direct switching]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A thread that stops picks its successor itself and switches straight to
// it: yield costs one context switch.  Only when the run queue and inbox
// are empty does it switch to its Task's scheduler context (schedule()),
// which idles.  Code running after a switch may be on another OS thread:
// after capstan_switch returns, nothing cached before it (Task*,
// Capability*) is used; see Note [TLS across a switch] in task.hpp.
// What the leaving side cannot do itself (release the lock it blocked
// under, recycle its own stack) it leaves in task->post, and the landing
// side does it in after_switch().

#include "schedule/schedule.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "asm/context.hpp"
#include "primitives/clock.hpp"
#include "capstan/errors.hpp"
#include "capstan/mvar.hpp"
#include "runtime/runtime.hpp"
#include "primitives/sanitizer.hpp"
#include "sparks/sparks.hpp"
#include "task/handover.hpp"

namespace capstan::rts {

namespace {

[[noreturn]] void thread_entry(void* arg);

void fatal_stack_overflow(Thread* t) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf,
                        "capstan: stack overflow in thread %llu%s%s%s: its stack of %zu bytes "
                        "is exhausted (raise it with +RTS -K<size>)\n",
                        static_cast<unsigned long long>(t->id), t->label ? " (" : "",
                        t->label ? t->label->c_str() : "", t->label ? ")" : "", rt.arena.size());
  if (n > 0) (void)!write(2, buf, static_cast<std::size_t>(n));
  std::abort();
}

void recycle(Capability* cap, Thread* t) {
  cap->stacks.put(t->stack_lo);
  cap->stacks_freed.add();
  if (t->tsan_fiber) __tsan_destroy_fiber(t->tsan_fiber);
  discard_thread(t);
}

// after_switch runs on the landing side of every switch.  `p` is the post
// box of the Task that switched (the same OS thread as ours).
inline void after_switch(PostSwitch* p) {
  if (Thread* dead = p->dead) [[unlikely]] {
    p->dead = nullptr;
    recycle(my_task()->cap, dead);
  }
  if (std::atomic<bool>* lock = p->unlock) {
    p->unlock = nullptr;
    // The blocked thread is off its stack: others may wake it now.
    lock->store(false, std::memory_order_release);
  }
  if (Thread* t = p->migrant) [[unlikely]] {
    p->migrant = nullptr;
    Capability* target = p->migrate_to;
    bool returning = p->migrant_priority;
    p->migrant_priority = false;
    t->priority = returning;
    target->inbox.push(t);  // See Note [Migrating to a spark's capability]
    // A safe call's thread counts as "in the call" until it is queued, so
    // shutdown never takes it for abandoned in between (Note [Shutdown]).
    if (returning) my_task()->in_safe_call.store(nullptr, std::memory_order_relaxed);
    // A thread back from a safe call: its capability lets it in at the next
    // safe point (Note [Returning from a safe call]).
    if (returning) target->context_switch.fetch_or(kReturning, std::memory_order_relaxed);
    notify_capability(target);
  }
}

void prepare_stack(Capability* cap, Thread* t) {
  t->stack_lo = cap->stacks.get();
  t->sp = capstan_make_context(t->stack_lo, rt.arena.size(), &thread_entry);
  if (rt.sanitizers && san::tsan()) t->tsan_fiber = __tsan_create_fiber(0);
  cap->stacks_allocated.add();
}

// switch_to leaves `from` (null: the Task's scheduler context) for `to`
// (null: the scheduler context).  The caller has already requeued, blocked
// or finished `from`.  Returns when someone switches back to `from`.
[[gnu::always_inline]] inline void switch_to(Task* task, Capability* cap, Thread* from, Thread* to,
                                             bool from_dying) {
  int* errno_loc = task->errno_loc;
  EhGlobals* eh = task->eh;
  void** save;
  if (from) {
    // Software overflow check, for stacks the arena could not guard.
    if (stack_pointer() < from->stack_lo) [[unlikely]]
      fatal_stack_overflow(from);
    from->saved_errno = *errno_loc;
    // Exception state is almost always empty: save it only when it is not.
    if (eh->caught || eh->uncaught) [[unlikely]] {
      from->eh = *eh;
      from->has_eh = true;
      *eh = EhGlobals{};
    }
    save = &from->sp;
  } else {
    save = &task->sched_sp;
  }
  void* target;
  if (to) {
    if (!to->sp) prepare_stack(cap, to);
    *errno_loc = to->saved_errno;
    if (to->has_eh) [[unlikely]] {
      *eh = to->eh;
      to->has_eh = false;
    }
    to->state = ThreadState::running;
    cap->current = to;
    cap->context_switches.add();
    if (rt.switch_every_safe_point) [[unlikely]]
      cap->context_switch.store(kTimesliceExpired, std::memory_order_relaxed);
    target = to->sp;
  } else {
    if (cap) cap->current = nullptr;  // null: a capless Task back from a safe call
    target = task->sched_sp;
  }
  if (!rt.sanitizers) [[likely]] {
    void* arg = capstan_switch(save, target, &task->post);
    // --- we may be on another OS thread now: `task` and `cap` are stale ---
    after_switch(static_cast<PostSwitch*>(arg));
    return;
  }
  // Sanitizer builds: announce the stack we are moving to (sanitizer.hpp).
  void* fake_stack = nullptr;
  if (san::asan()) {
    const void* lo = to ? to->stack_lo : task->native_stack_lo;
    std::size_t size = to ? rt.arena.size() : task->native_stack_size;
    __sanitizer_start_switch_fiber(from_dying ? nullptr : &fake_stack, lo, size);
  }
  if (san::tsan()) __tsan_switch_to_fiber(to ? to->tsan_fiber : task->tsan_fiber, 0);
  void* arg = capstan_switch(save, target, &task->post);
  if (san::asan()) __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
  after_switch(static_cast<PostSwitch*>(arg));
}

void drain_inbox(Capability* cap) {
  std::uint64_t n = 0;
  for (Thread* t = cap->inbox.take_all(); t;) {
    Thread* next = t->link;
    if (t->priority) [[unlikely]] {  // Note [Returning from a safe call]
      t->priority = false;
      cap->run_queue.push_front(t);
    } else {
      cap->run_queue.push_back(t);
    }
    t = next;
    ++n;
  }
  if (n) cap->threads_received.add(n);
}

// Note [Pushing work]
// ~~~~~~~~~~~~~~~~~~~
// GHC's schedulePushWork: a capability with surplus runnable threads hands
// some to an idle capability, rather than idle capabilities stealing them.
// The run queue stays owner-private (no fences on the hot path).  A push
// happens only when it can pay off:
//  * some capability is idle (n_idle, a relaxed hint: a stale read costs one
//    missed or one useless push, never correctness);
//  * at least kPushThreshold threads wait; and
//  * the backlog has lasted kBacklogNs: the queue has not emptied since we
//    first saw it long.  Shipping a thread to another core costs a few
//    hundred ns of cache traffic (its Thread object, closure and data move),
//    more than a tiny thread's whole run, so short bursts of tiny threads
//    stay local (threads001 at -N2 went from 97 to 189 ns per thread when
//    every burst was split; see docs/benchmarks.md), while a queue that
//    stays long is real work worth a second core.
// Half of the waiting threads go, oldest first, to one idle capability;
// locked threads (fork_on, bound) never move.  A sequential chain of
// hand-offs (ping-pong, a token ring) never has more than one thread
// waiting, so it is never spread across capabilities, where every hand-off
// would cost a cross-core wake-up (the GHC -N2 collapse).
constexpr std::int64_t kBacklogNs = 50'000;

void push_work(Capability* cap) {
  Capability* target = nullptr;
  for (unsigned i = 1; i < rt.n_caps; ++i) {
    Capability* c = rt.caps[(cap->no + i) % rt.n_caps];
    if (c->idle.load(std::memory_order_relaxed)) {
      target = c;
      break;
    }
  }
  if (!target) return;
  std::size_t k = cap->run_queue.size() / 2;
  Thread* first = nullptr;
  Thread* last = nullptr;
  std::uint64_t moved = 0;
  for (std::size_t i = 0; i < k; ++i) {
    Thread* t = cap->run_queue.pop_front();
    if (t->locked) {
      cap->run_queue.push_back(t);
      continue;
    }
    t->cap = target;
    t->link = nullptr;
    if (last) last->link = t; else first = t;
    last = t;
    ++moved;
  }
  if (!moved) return;
  target->inbox.push_chain(first, last);
  cap->threads_pushed.add(moved);
  notify_capability(target);
}

// backlog_wants_push: the slow half of the push test in pick (see Note
// [Pushing work]); reads the clock on every 16th call at most.
[[gnu::noinline]] bool backlog_wants_push(Capability* cap) {
  if (cap->push_check_countdown-- != 0) return false;
  cap->push_check_countdown = 15;
  std::int64_t now = now_ns();
  if (cap->backlog_since_ns == 0) {
    cap->backlog_since_ns = now;
    return false;
  }
  return now - cap->backlog_since_ns >= kBacklogNs;
}

// pick returns the next thread to run on cap, or null.
inline Thread* pick(Capability* cap) {
  if (cap->handoff) [[unlikely]] return nullptr;  // the scheduler context hands over first
  // A quiescent point: whatever this capability did before (an mvar serve,
  // say) happens-before anyone who sees the new epoch.  Note [Killing a
  // blocked thread].
  cap->sched_epoch.store(cap->sched_epoch.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);
  if (rt.stop.load(std::memory_order_relaxed)) [[unlikely]] return nullptr;
  if (cap->inbox.maybe_nonempty()) drain_inbox(cap);
  poll_spark_requests(cap);
  Thread* t = cap->run_queue.pop_front();
  if (cap->run_queue.empty()) {
    cap->backlog_since_ns = 0;
  } else if (cap->run_queue.size() >= kPushThreshold &&
             rt.n_idle.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (backlog_wants_push(cap)) push_work(cap);
  }
  // Note [Bound threads]: another Task's bound thread is run by that Task;
  // our caller switches to the scheduler context, which hands over.
  if (t && t->bound_task && t->bound_task != cap->running_task.load(std::memory_order_relaxed))
      [[unlikely]] {
    cap->handoff = t;
    return nullptr;
  }
  return t;
}

// Note [Sleeping capabilities]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// An idle capability first spins for up to kSpinNs watching its inbox (a
// futex wake-up costs 5-24 us here, far more than most waits), then sleeps.
// The hand-shake with a sender is Dekker's, with seq_cst operations only
// (no stand-alone fences, which ThreadSanitizer cannot model):
//   sleeper: sleeping.store(true, seq_cst);  if inbox.head.load(seq_cst) == null: park()
//   sender:  inbox.head CAS (seq_cst);       if sleeping.load(seq_cst):          unpark()
// All four operations are in the single total order S of seq_cst
// operations.  If the sleeper's load misses the push, it precedes the CAS in
// S, so the sleeper's earlier store precedes the sender's later load, which
// therefore sees sleeping == true and unparks.  Either the sleeper sees the
// new work and does not park, or the sender sees `sleeping` and unparks.
// Cost: the sleeper's seq_cst store (an xchg on x86) is on the idle path
// only; the sender's CAS is locked anyway and its seq_cst load is a plain
// load on x86 and an ldar on ARMv8.  The Parker's sticky flag covers an unpark that
// lands between the check and the futex wait (Note [Sticky wake-up]).
// The stop flag is part of the re-check (silk PR #152's lost shutdown).
constexpr std::int64_t kSpinNs = 50'000;

bool has_work(Capability* cap) {
  return cap->inbox.maybe_nonempty() || rt.stop.load(std::memory_order_relaxed);
}

constexpr unsigned kSparkRounds = 20;

bool any_sparks() {
  for (Capability* c : rt.caps)
    if (c->sparks.size() != 0) return true;
  return false;
}

// try_sparks: an idle capability turns a spark into a spark thread (own
// pool first, then by asking others; Note [Spark pools]).
bool try_sparks(Capability* cap) {
  poll_spark_requests(cap);
  if (detail::spark_base* s = find_spark(cap)) {
    start_spark_thread(cap, s);
    return true;
  }
  return false;
}

void idle(Task* task, Capability* cap) {
  rt.n_idle.fetch_add(1, std::memory_order_seq_cst);
  cap->idle.store(true, std::memory_order_relaxed);
  std::int64_t t0 = now_ns();
  bool found = false;
  for (unsigned round = 0; !found; ++round) {
    // Spin for kSpinNs watching the inbox, answering steal requests, and
    // looking for sparks (asking another capability every 256 turns: each
    // ask costs the victim a poll, so thieves back off).
    std::int64_t spin_start = now_ns();
    for (unsigned i = 0; !found; ++i) {
      if (has_work(cap)) found = true;
      else if ((i & 255) == 0 && try_sparks(cap)) found = true;
      else if ((i & 63) == 63 && now_ns() - spin_start > kSpinNs) break;
      else {
        poll_spark_requests(cap);
        cpu_relax();
      }
    }
    if (found) break;
    // Sparks elsewhere whose owner has not answered yet: keep trying for a
    // while (bounded: kSparkRounds spins), then sleep anyway; the ticker
    // wakes a sleeper while sparks wait (Note [Waking capabilities for sparks]).
    if (round < kSparkRounds && any_sparks()) continue;
    if (round == 0) cap->stacks.trim_idle();  // Note [Trimming when idle]
    cap->hold.store(Hold::sleeping, std::memory_order_seq_cst);
    if (cap->inbox.nonempty_seq_cst() || rt.stop.load(std::memory_order_seq_cst)) {
      cap->hold.store(Hold::held, std::memory_order_relaxed);
      break;
    }
    detail::g_spark_sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (cap->sparks.size() == 0 && !cap->spark_wake.load(std::memory_order_seq_cst)) {
      cap->sleeps.add();
      task->parker.park();
    }
    detail::g_spark_sleepers.fetch_sub(1, std::memory_order_seq_cst);
    cap->hold.store(Hold::held, std::memory_order_relaxed);
    cap->spark_wake.store(false, std::memory_order_relaxed);
    found = has_work(cap);  // else spin again: woken for sparks, or spuriously
  }
  cap->idle.store(false, std::memory_order_relaxed);
  rt.n_idle.fetch_sub(1, std::memory_order_seq_cst);
  // Note [Stopping the ticker]: a busy capability needs the ticker back.
  if (rt.ticker_parked.load(std::memory_order_seq_cst)) {
    rt.ticker_parked.store(0, std::memory_order_seq_cst);
    futex_wake(&rt.ticker_parked, 1);
  }
  cap->idle_ns.add(static_cast<std::uint64_t>(now_ns() - t0));
}

void report_uncaught(Thread* t, const char* what) {
  t->home->all_lock.lock();  // labels are guarded by it (label_thread)
  std::string label = t->label ? *t->label : "unlabelled";
  t->home->all_lock.unlock();
  std::fprintf(stderr, "capstan: uncaught exception in thread %llu (%s): %s\n",
               static_cast<unsigned long long>(t->id), label.c_str(), what);
  my_task()->cap->uncaught_exceptions.add();
}

void unlink_from_home(Thread* t) {
  Capability* home = t->home;
  home->all_lock.lock();
  if (t->all_prev) t->all_prev->all_next = t->all_next; else home->all_head = t->all_next;
  if (t->all_next) t->all_next->all_prev = t->all_prev;
  home->all_lock.unlock();
}

void notify_shutdown() {
  // Note [Shutdown]: every finish during shutdown pokes the main thread.
  if (rt.shutdown_events) rt.shutdown_events->notify();
}

// Note [Finishing a thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A finished thread stands on the stack it would free.  It picks its
// successor, leaves itself in task->post.dead, and switches away telling
// ASan it leaves for good; the landing side (after_switch) returns the
// stack to the capability's pool and the Thread to its free list.
[[noreturn]] void finish_current(Thread* self) {
  unlink_from_home(self);
  self->state = ThreadState::finished;
  Task* task = my_task();
  Capability* cap = task->cap;
  cap->threads_finished.add();
  if (rt.shutting_down.load(std::memory_order_acquire)) [[unlikely]] notify_shutdown();
  // A fork_os or in-call thread's Task leaves with it (Note [Bound threads]).
  bool task_leaves = self == task->bound_thread && !self->is_main;
  if (task_leaves) [[unlikely]] {
    task->bound_thread = nullptr;
    task->bound_done = true;
  }
  Thread* next = task_leaves ? nullptr : pick(cap);
  task->post.dead = self;
  switch_to(task, cap, self, next, /*from_dying=*/true);
  __builtin_unreachable();
}

[[noreturn]] void thread_entry(void* arg) {
  if (rt.sanitizers && san::asan()) [[unlikely]]
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  after_switch(static_cast<PostSwitch*>(arg));
  Thread* self = my_task()->cap->current;
  // Bound threads always start: a fork_os or in-call thread's Task waits for
  // it; it meets thread_killed at its first runtime call instead.
  if (rt.shutting_down.load(std::memory_order_acquire) && !self->bound) [[unlikely]] {
    my_task()->cap->threads_killed.add();  // reclaimed before it ever ran
  } else {
    try {
      self->ops->invoke(self->closure);
    } catch (const thread_killed&) {
      my_task()->cap->threads_killed.add();
    } catch (const blocked_indefinitely&) {
      // As GHC's childHandler: a forked thread that can never be woken
      // ends quietly (counted in the statistics).
      my_task()->cap->threads_blocked_indefinitely.add();
    } catch (const std::exception& e) {
      report_uncaught(self, e.what());
    } catch (...) {
      report_uncaught(self, "unknown exception (not derived from std::exception)");
    }
  }
  self->ops->destroy(self->closure);
  finish_current(self);
}

// A fork_os thread's OS thread: serves its bound thread until it finishes.
void bound_task_body(Task* task) { schedule(task); }

std::uint64_t next_id_in_block(std::uint64_t& next, std::uint64_t& end) {
  if (next == end) {
    std::uint64_t base = rt.id_blocks.fetch_add(kIdBlock, std::memory_order_relaxed);
    next = base + 1;
    end = base + kIdBlock + 1;
  }
  return next++;
}

std::uint64_t next_thread_id(Capability* cap) { return next_id_in_block(cap->next_id, cap->id_end); }

Thread* new_thread_object(Capability* cap) { return cap->threads.get(); }

void link_home(Capability* cap, Thread* t) {
  t->home = cap;
  t->all_prev = nullptr;
  cap->all_lock.lock();
  t->all_next = cap->all_head;
  if (cap->all_head) cap->all_head->all_prev = t;
  cap->all_head = t;
  cap->all_lock.unlock();
}

void enqueue_new(Capability* cap, Thread* t, Capability* target) {
  t->cap = target;
  t->state = ThreadState::runnable;
  if (target == cap) {
    cap->run_queue.push_back(t);  // pushed on to idle capabilities by pick
  } else {
    target->inbox.push(t);
    notify_capability(target);
  }
}

}  // namespace

[[noreturn]] void throw_not_green(const char* what) {
  throw usage_error(std::string(what) +
                    ": called from an OS thread that is not running a green thread; "
                    "call it from inside capstan::run (the main function or a thread it forked)");
}

Task* require_green_thread(const char* what) {
  Task* task = my_task();
  if (!task || !task->cap || !task->cap->current) [[unlikely]] {
    if (task && task->in_safe_call.load(std::memory_order_relaxed))
      throw usage_error(std::string(what) +
                        ": called from inside capstan::safe_call, whose function runs "
                        "without a capability; call back into the runtime with "
                        "capstan::call_in");
    throw_not_green(what);
  }
  return task;
}

Thread* alloc_thread(std::size_t size, std::size_t align, const char* what) {
  Task* task = require_green_thread(what);
  Thread* t = new_thread_object(task->cap);
  if (size <= Thread::kInlineClosure && align <= 16) {
    t->closure = t->inline_closure;
  } else {
    t->closure_align = align < 16 ? 16 : align;
    t->closure = ::operator new(size, std::align_val_t(t->closure_align));
  }
  return t;
}

void discard_thread(Thread* t) noexcept {
  if (t->closure && t->closure != t->inline_closure)
    ::operator delete(t->closure, std::align_val_t(t->closure_align));
  delete t->label;
  // Reset to a pristine state for reuse.
  t->sp = nullptr;
  t->stack_lo = nullptr;
  t->closure = nullptr;
  t->closure_align = 0;
  t->label = nullptr;
  t->locked = t->bound = t->is_main = t->priority = false;
  t->bound_task = nullptr;
  t->saved_errno = 0;
  t->eh = EhGlobals{};
  t->state = ThreadState::runnable;
  t->why = WhyBlocked::not_blocked;
  t->blocked_on = nullptr;
  t->waiter = nullptr;
  t->tsan_fiber = nullptr;
  t->has_eh = false;
  Task* task = my_task();
  if (task && task->cap) task->cap->threads.put(t);
  else rt.depot.give_batch(t, 1);
}

// Note [Fork back-pressure]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread that forks in a loop would, within one 20 ms timeslice, queue
// hundreds of thousands of threads whose Thread objects and closures have
// long left the cache by the time they run, and whose memory is all live at
// once.  So when its capability's run queue reaches kForkBackPressure
// threads, the forker's timeslice is expired early: at the fork's safe point
// it goes to the back (the usual rule), the threads it made run while they
// are still in cache, and it resumes after them.  New threads still go to
// the back; this only shortens the forker's slice.  Memory for pending new
// threads is bounded by the queue length rather than by the timeslice.
std::uint64_t start_thread(Thread* t, const detail::closure_ops* ops, int cap_no) {
  Task* task = my_task();
  Capability* cap = task->cap;
  t->ops = ops;
  t->id = next_thread_id(cap);
  link_home(cap, t);
  cap->threads_created.add();
  Capability* target = cap;
  if (cap_no == detail::kBoundOsThread) {
    // fork_os: Note [Bound threads].  The OS thread starts first (it may
    // fail, and then nothing has happened), then waits for the thread.
    target = rt.caps[rt.next_bound_cap.fetch_add(1, std::memory_order_relaxed) % rt.n_caps];
    Task* b = new_task(TaskKind::os_bound);
    b->bound_thread = t;
    b->last_cap = target;
    t->bound = t->locked = true;
    t->bound_task = b;
    try {
      start_os_thread(b, &bound_task_body);
    } catch (...) {
      unlink_from_home(t);
      cap->threads_created.v.store(cap->threads_created.get() - 1, std::memory_order_relaxed);
      t->ops = nullptr;
      discard_thread(t);
      throw;
    }
  } else if (cap_no >= 0) {
    target = rt.caps[static_cast<unsigned>(cap_no) % rt.n_caps];
    t->locked = true;
  }
  std::uint64_t id = t->id;  // t may run (and finish) elsewhere from here on
  enqueue_new(cap, t, target);
  // See Note [Fork back-pressure].
  if (cap->run_queue.size() >= kForkBackPressure) [[unlikely]]
    request_context_switch(cap);
  // Every runtime call is a safe point.
  if (cap->context_switch.load(std::memory_order_relaxed)) [[unlikely]] yield_point_slow();
  return id;
}

Thread* create_system_thread(Capability* cap, const detail::closure_ops* ops, void* closure,
                             std::size_t closure_size, bool bound, bool locked) {
  Thread* t = new_thread_object(cap);
  t->closure = t->inline_closure;  // closure_size <= kInlineClosure, trivially copyable
  std::memcpy(t->inline_closure, closure, closure_size);
  t->ops = ops;
  t->id = next_thread_id(cap);
  t->bound = bound;
  t->is_main = bound;  // the only bound system thread is run()'s main
  t->locked = locked;
  link_home(cap, t);
  cap->threads_created.add();
  t->cap = cap;
  cap->run_queue.push_back(t);
  return t;
}

// Note [Bound threads]
// ~~~~~~~~~~~~~~~~~~~~
// A bound thread (run()'s main, fork_os, an in-call) runs only on its
// bound_task's OS thread, and is locked to one capability.  When a Task
// picks another Task's bound thread it does not run it: it switches to its
// scheduler context, which gives the capability and the thread to the bound
// Task (give(), Note [Handing over a capability]) and then waits, capless,
// as a spare (a worker) or for its own bound thread's turn (a bound Task).
// Unlike GHC, a bound Task is not reserved for its thread: while it holds
// the capability it runs unbound threads too, switching to them directly.
// So an MVar hand-off between the bound main thread and an unbound thread
// is an ordinary green switch on the main OS thread (boundpingpong), and an
// OS-level hand-over happens only when two different Tasks' bound threads
// take turns on one capability, or after a safe call let a spare in.  The
// bound semantics hold: a bound thread's code only ever runs on its own OS
// thread (tests/rts/foreign/bound_test.cpp checks gettid()).
// A fork_os or in-call Task leaves schedule() when its thread finishes,
// giving its capability up (release_capability).
void drain_inbox_now(Capability* cap) {
  if (cap->inbox.maybe_nonempty()) drain_inbox(cap);
}

void switch_to_scheduler_capless(Task* task, Thread* cur) {
  switch_to(task, nullptr, cur, nullptr, false);
}

void move_off_bound_task(Task* task, Thread* cur) {
  Capability* cap = task->cap;
  cur->state = ThreadState::runnable;
  cap->run_queue.push_front(cur);
  task->pass_cap_to_spare = true;  // done by our scheduler context
  switch_to(task, cap, cur, nullptr, false);
}

Thread* create_incall_thread(Task* task, Capability* home, const detail::closure_ops* ops,
                             const void* closure, std::size_t closure_size) {
  Thread* t = task->threads.get();
  t->closure = t->inline_closure;  // closure_size <= kInlineClosure, trivially copyable
  std::memcpy(t->inline_closure, closure, closure_size);
  t->ops = ops;
  t->id = next_id_in_block(task->next_id, task->id_end);
  t->bound = t->locked = true;
  t->bound_task = task;
  t->cap = home;
  t->state = ThreadState::runnable;
  link_home(home, t);
  rt.incall_threads_created.fetch_add(1, std::memory_order_relaxed);
  return t;
}

void schedule(Task* task) {
  for (;;) {
    Capability* cap = task->cap;
    if (!cap) {
      if (task->bound_done) return;
      // A worker with nothing to serve waits as a spare, or exits if its
      // capability has enough of them.
      // (A new worker was handed its capability before it started.)
      if (!task->bound_thread && !task->handed.load(std::memory_order_acquire) &&
          !become_spare(task))
        return;
      if (!wait_for_capability(task)) return;  // the runtime stopped
      if (Thread* first = task->handed_thread) {
        task->handed_thread = nullptr;
        switch_to(task, task->cap, nullptr, first, false);
      }
      continue;
    }
    if (task->bound_done) [[unlikely]] {
      release_capability(task);
      return;
    }
    if (task->pass_cap_to_spare) [[unlikely]] {
      // Note [Unbound threads on a bound Task]: the thread that left waits
      // at the front of the queue for a spare.
      task->pass_cap_to_spare = false;
      release_to_spare(drop_capability(task));
      continue;
    }
    if (Thread* h = cap->handoff) [[unlikely]] {
      cap->handoff = nullptr;
      give(h->bound_task, drop_capability(task), h);
      continue;
    }
    if (Thread* t = pick(cap)) {
      switch_to(task, cap, nullptr, t, false);
      continue;
    }
    if (cap->handoff) continue;
    if (rt.stop.load(std::memory_order_acquire)) return;
    idle(task, cap);
  }
}

// Note [Shutdown checkpoints]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// During shutdown every runtime call of an unbound thread is a checkpoint:
//  * after stop (the grace period is over) the thread is abandoned: it
//    switches to its Task's scheduler and is never resumed (its stack is
//    freed by run());
//  * otherwise it first yields - so a thread that catches thread_killed and
//    calls in again, in a loop, cannot keep the main thread (which drives
//    shutdown) off its capability - and then throws thread_killed.
// While the thread is unwinding (uncaught_exceptions() > 0) nothing is
// thrown: throwing from a destructor would terminate().
[[noreturn]] void abandon_current(Thread* t) {
  Task* task = my_task();
  t->state = ThreadState::blocked;
  t->why = WhyBlocked::on_shutdown;
  switch_to(task, task->cap, t, nullptr, false);
  __builtin_unreachable();  // nobody resumes an abandoned thread
}

void check_killed(Thread* t) {
  if (!rt.shutting_down.load(std::memory_order_acquire) || t->is_main) return;
  if (rt.stop.load(std::memory_order_acquire)) abandon_current(t);
  if (std::uncaught_exceptions() != 0) return;
  Task* task = my_task();
  Capability* cap = task->cap;
  Thread* next = pick(cap);
  if (next || cap->handoff) {
    t->state = ThreadState::runnable;
    cap->run_queue.push_back(t);
    switch_to(task, cap, t, next, false);
  }
  if (rt.stop.load(std::memory_order_acquire)) abandon_current(t);
  throw thread_killed{};
}

void yield_current() {
  Task* task = my_task_before_switch();
  if (!task || !task->cap || !task->cap->current) [[unlikely]] require_green_thread("capstan::yield");
  Capability* cap = task->cap;
  Thread* cur = cap->current;
  cap->context_switch.store(0, std::memory_order_relaxed);
  if (rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] check_killed(cur);
  Thread* next = pick(cap);
  if (!next && !cap->handoff) return;  // nothing else to run: keep going
  cur->state = ThreadState::runnable;
  cap->run_queue.push_back(cur);
  switch_to(task, cap, cur, next, false);
  if (rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] check_killed(cur);
}

void yield_point_slow() {
  Task* task = require_green_thread("capstan::yield_point");
  Capability* cap = task->cap;
  std::uint32_t why = cap->context_switch.exchange(0, std::memory_order_relaxed);
  cap->sched_epoch.store(cap->sched_epoch.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);  // a quiescent point too
  check_killed(cap->current);
  if (why & kReturning) {
    // Note [Returning from a safe call]: the returner goes first, and we
    // keep our place right behind it.
    Thread* cur = cap->current;
    cur->state = ThreadState::runnable;
    // Its timeslice may have expired too: then it goes to the back.
    if (why & kTimesliceExpired) cap->run_queue.push_back(cur);
    else cap->run_queue.push_front(cur);
    Thread* next = pick(cap);
    if (next == cur) {
      cur->state = ThreadState::running;
      return;
    }
    switch_to(task, cap, cur, next, false);
  } else if (why & kTimesliceExpired) {
    yield_current();  // See Note [Requeue front or back]: back
  } else if (why & kInterrupt) {
    // Interrupted, not expired: the thread keeps the front of the queue, so
    // after the interrupt's work (the inbox) it simply continues.
    if (cap->inbox.maybe_nonempty()) drain_inbox(cap);
  }
}

// Note [Blocking on an MVar]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// The blocker enqueues its waiter and marks itself blocked while holding
// the mvar's lock, then switches away *still holding it*; the landing side
// releases it (post.unlock).  A waker must take that lock to find the
// waiter, so it cannot see the blocked thread before its context is fully
// saved: no thread is ever resumed half-switched, and no wake-up is lost
// because the check ("is the mvar empty?") and the enqueue happen under the
// same lock the waker takes (design brief hazard 1).  The waker dequeues
// the waiter under the lock, which gives it alone the right to wake the
// thread (hazard 2): a thread is woken exactly once per block.
void park_current(Task* task, Thread* cur, std::atomic<bool>* unlock_after) {
  Capability* cap = task->cap;
  cur->state = ThreadState::blocked;
  cur->why = WhyBlocked::on_mvar;
  Thread* next = pick(cap);
  task->post.unlock = unlock_after;
  switch_to(task, cap, cur, next, false);
}

// Note [Migrating to a spark's capability]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A spark pool is touched only by its capability's owner (Note [Spark
// pools]).  A thread that made a spark and then moved (woken elsewhere, or
// pushed) goes back to the spark's capability before it forces or discards
// the spark: it queues itself on that capability's inbox - after its
// context is saved, by the landing side, as with every hand-over - and
// continues there as its owner.
void migrate_current_to(Capability* target) {
  Task* task = my_task();
  Capability* cap = task->cap;
  Thread* cur = cap->current;
  cur->cap = target;
  cur->state = ThreadState::runnable;
  Thread* next = pick(cap);
  task->post.migrant = cur;
  task->post.migrate_to = target;
  switch_to(task, cap, cur, next, false);
}

// Note [Wake-up affinity]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A thread woken by a running green thread joins the *waker's* capability
// (unless it is locked there by fork_on or bound), as Go's runnext does: the
// woken thread usually consumes what the waker just produced, so its data
// is in this core's cache, and a ping-pong or a ring stays on one
// capability instead of paying a cross-core wake-up per hand-off.  Load is
// spread by Note [Pushing work] instead.  Wake-ups from an OS thread that
// runs no green thread, or of locked threads, go to the thread's own
// capability through its inbox.
void wake(Thread* t) noexcept {
  t->state = ThreadState::runnable;
  t->why = WhyBlocked::not_blocked;
  Task* task = my_task_before_switch();  // wake never switches
  Capability* mine = task ? task->cap : nullptr;
  if (mine) {
    if (mine->current && !t->locked) t->cap = mine;
    if (t->cap == mine) {
      mine->run_queue.push_back(t);
      return;
    }
  }
  Capability* target = t->cap;
  target->inbox.push(t);
  notify_capability(target);
}

void wake_home(Thread* t) noexcept {
  t->state = ThreadState::runnable;
  t->why = WhyBlocked::not_blocked;
  Capability* home = t->cap;  // read before the push: t may run at once after it
  Task* task = my_task_before_switch();
  if (task && task->cap == home) {
    home->run_queue.push_back(t);
    return;
  }
  home->inbox.push(t);
  notify_capability(home);
}

void notify_capability(Capability* cap) noexcept {
  // See Note [Sleeping capabilities] and Note [Handing over a capability]:
  // the sender's half of the hand-shakes (the inbox CAS that precedes every
  // call with work to report is seq_cst).
  switch (cap->hold.load(std::memory_order_seq_cst)) {
    case Hold::sleeping:
      // acquire: the Task we read is fully constructed.  A stale read (the
      // sleeper woke and handed over meanwhile) unparks a Task that
      // re-checks and parks again; the new holder sees the inbox itself.
      cap->running_task.load(std::memory_order_acquire)->parker.unpark();
      break;
    case Hold::free:
      if (try_claim(cap)) release_to_spare(cap);
      break;
    case Hold::held:
      break;
  }
}

void interrupt_capability(Capability* cap) noexcept {
  cap->context_switch.fetch_or(kInterrupt, std::memory_order_relaxed);
}

void request_context_switch(Capability* cap) noexcept {
  cap->context_switch.fetch_or(kTimesliceExpired, std::memory_order_relaxed);
}

// Note [Killing a blocked thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At shutdown every blocked thread is woken with thread_killed so its stack
// unwinds and its destructors run.  The killer must find the mvar the thread
// waits on, but that mvar may be destroyed concurrently (its waiters are then
// orphaned).  During shutdown Thread::wait_lock guards blocked_on/waiter: the
// blocker sets them, and a waker or an mvar's destructor clears them, under
// it (while holding the mvar lock: order mvar lock -> wait_lock).  The
// killer holds wait_lock while it *tries* to take the mvar lock (the reverse
// order, so it only tries, and on failure backs off and is retried on the
// next sweep).  While the killer holds wait_lock with blocked_on == m, m
// cannot finish being destroyed, so m is valid.  A waiter that blocked while
// unwinding (in a destructor) is not killed: throwing there would terminate().
//
// Before shutdown there is no killer, and wait_lock would cost two locked
// instructions per MVar hand-off, so blockers and wakers skip it while
// rt.waits_need_lock is false.  Turning the lock on is the killer's job, and
// it must be sure that nobody still skips it (an asymmetric fence, as in
// userspace RCU or folly's asymmetricHeavyBarrier):
//   1. waits_need_lock = true (seq_cst);
//   2. membarrier(PRIVATE_EXPEDITED): every running thread of the process
//      executes a full barrier, so every later read of the flag sees true;
//   3. wait until every other capability has made a scheduling decision
//      (sched_epoch moved, read with acquire) or is idle: an mvar operation
//      that read false before step 2 has then finished, and its writes to
//      blocked_on happen-before the killer's reads.
// OS threads that run no green thread (try_put from a plain thread) always
// take the lock; so does everyone if membarrier is unavailable.
bool request_kill(Thread* t) noexcept {
  t->wait_lock.lock();
  detail::mvar_core* m = t->blocked_on;
  if (!m) {
    t->wait_lock.unlock();
    return true;
  }
  if (!m->try_lock()) {
    t->wait_lock.unlock();
    return false;
  }
  detail::waiter* w = t->waiter;
  // A thread that blocked while unwinding is not killed (see above): its
  // uncaught-exception count was saved with it when it switched out.
  bool killable = !(t->has_eh && t->eh.uncaught != 0);
  if (killable) {
    m->remove(*w);
    w->outcome = detail::waiter::killed;
    t->blocked_on = nullptr;
    t->waiter = nullptr;
  }
  t->wait_lock.unlock();
  m->unlock();  // before waking: a killed thread may destroy m as it unwinds
  if (killable) wake(t);
  return true;
}

}  // namespace capstan::rts
