// switch.hpp - switching the running green thread: switch_to and its
// landing side, after_switch.  See Note [Direct switching] in
// schedule/schedule.cpp.
//
// Header-only on purpose: switch_to is on every yield, block, wake-up
// hand-off and finish, and each of those (schedule.cpp, yield.cpp,
// block.cpp, fork.cpp, shutdown's checkpoints) must inline it, as it did
// when they all were one translation unit.  Nothing here may become a
// call into another translation unit on the common path.  The functions
// are `static inline`: each translation unit has its own copy with
// internal linkage, so the calls that remain (after_switch's slow
// branches, prepare_stack) bind locally in the shared library too, as
// they did when these were file-local.
#pragma once

#include "asm/context.hpp"
#include "capability/capability.hpp"
#include "primitives/sanitizer.hpp"
#include "runtime/runtime.hpp"
#include "task/handover.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"
#include "thread/threads.hpp"
#include "trace/trace.hpp"

namespace capstan::rts {

// thread_entry is where every green thread starts (schedule/fork.cpp).
[[noreturn]] void thread_entry(void* arg);

// fatal_stack_overflow reports t's overflow (task/overflow_handler.hpp's
// message) and aborts: for stacks the arena could not guard.
[[noreturn]] void fatal_stack_overflow(Thread* t);

// release_blocker releases the lock word of a thread that blocked on its
// way out (park.hpp): it is off its stack now, and others may wake it.
static inline void release_blocker(PostSwitch* p) {
  if (std::atomic<bool>* lock = p->unlock) {
    p->unlock = nullptr;
    lock->store(false, std::memory_order_release);
  }
}

// after_switch_rare is after_switch when a thread died or migrates: in
// the order the common path keeps (the unlock between the two).
[[gnu::noinline]] static void after_switch_rare(PostSwitch* p) {
  p->rare = false;
  if (Thread* dead = p->dead) {
    p->dead = nullptr;
    recycle(my_task()->cap, dead);
  }
  release_blocker(p);
  if (Thread* t = p->migrant) {
    p->migrant = nullptr;
    Capability* target = p->migrate_to;
    bool returning = p->migrant_returning;
    p->migrant_returning = false;
    t->returning = returning;
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

// after_switch runs on the landing side of every switch.  `p` is the post
// box of the Task that switched (the same OS thread as ours).
static inline void after_switch(PostSwitch* p) {
  if (p->rare) [[unlikely]] {
    after_switch_rare(p);
    return;
  }
  release_blocker(p);
}

// requeue_running puts `cur`, which is still running on this OS thread,
// back in cap's run queue (front or back) ahead of a switch away from it.
// A thief must not take it until that switch has left its stack: the
// landing side releases `leaving` (after_switch's unlock).  A caller that
// then does not switch (pick gave `cur` back) calls stay_running.  Note
// [Requeued while still running] in schedule/steal.cpp.
// mark_leaving is its first half, for a caller that queues `cur` itself
// (pick_behind).
static inline void mark_leaving(Task* task, Thread* cur) {
  cur->state = ThreadState::runnable;
  cur->leaving.store(true, std::memory_order_relaxed);
  task->post.unlock = &cur->leaving;
}
static inline void requeue_running(Task* task, Capability* cap, Thread* cur, bool front) {
  mark_leaving(task, cur);
  if (front) cap->run_queue.push_front(cur); else cap->run_queue.push_back(cur);
}
static inline void stay_running(Task* task, Thread* cur) {
  task->post.unlock = nullptr;
  cur->leaving.store(false, std::memory_order_relaxed);
  cur->state = ThreadState::running;
}

// reserve_stack gives t a reserve stack when no other can be had (Note
// [Running out of stacks] in storage/stack.cpp); fork.cpp.
void* reserve_stack(Thread* t);

// Out of line: inlined into a switch it made the yield and hand-off paths
// spill more (switch 1000000 under callgrind 406.5 M instructions out of
// line, 412.5 M inline), for a call once in a thread's life.
[[gnu::noinline]] static void prepare_stack(Capability* cap, Thread* t) {
  t->stack_lo = cap->stacks.get();
  if (!t->stack_lo) [[unlikely]] t->stack_lo = reserve_stack(t);
  // See sanitizer.hpp: no redzone left by the stack's or the address's past.
  if (rt.sanitizers && san::asan() && &__asan_unpoison_memory_region != nullptr) [[unlikely]]
    __asan_unpoison_memory_region(t->stack_lo, rt.arena.size());
  t->sp = capstan_make_context(t->stack_lo, rt.arena.start_size(t->stack_lo), &thread_entry);  // Note [Stack colouring]
  if (rt.sanitizers && san::tsan()) t->tsan_fiber = __tsan_create_fiber(0);
  cap->stacks_allocated.add();
}

// switch_impl is switch_to, compiled twice (Note [Switch hooks]): with
// Hooks false it leaves out the event trace, +RTS -C0's expiry and the
// sanitizers' fiber calls, which rt.switch_hooks says are all off.
template <bool Hooks>
[[gnu::always_inline]] static inline void switch_impl(Task* task, Capability* cap, Thread* from,
                                                      Thread* to, bool from_dying,
                                                      SwitchWhy why) {
  if (Hooks && rt.tracing) [[unlikely]]
    trace_switch(cap, from, to, why);
  int* errno_loc = task->errno_loc;
  EhGlobals* eh = task->eh;
  void** save;
  if (from) {
    // Software overflow check, for stacks the arena could not guard.
    if (stack_pointer() < from->stack_lo) [[unlikely]]
      fatal_stack_overflow(from);
    if (!from_dying) {  // a finished thread's are never read again
      from->saved_errno = *errno_loc;
      from->last_ran_ns = rt.coarse_now_ns.load(std::memory_order_relaxed);  // for dumps
    }
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
    // An exception was thrown to `to` while it was off the CPU: make its
    // next safe point look (Note [Raising asynchronously]).
    if (to->async_pending.load(std::memory_order_relaxed)) [[unlikely]]
      cap->context_switch.fetch_or(kInterrupt, std::memory_order_relaxed);
    cap->context_switches.add();
    if (Hooks && rt.switch_every_safe_point) [[unlikely]]
      // An RMW, never a plain store, which could clear a thrower's
      // kInterrupt (Note [Requeue front or back]).
      cap->context_switch.fetch_or(kTimesliceExpired, std::memory_order_relaxed);
    target = to->sp;
  } else {
    if (cap) cap->current = nullptr;  // null: a capless Task back from a safe call
    target = task->sched_sp;
  }
  if (!Hooks || !rt.sanitizers) [[likely]] {
    // A finished thread is never resumed: nothing of it to save (asm/context.hpp).
    if (from_dying) capstan_switch_dead(target, &task->post);
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
  if (from_dying) capstan_switch_dead(target, &task->post);
  void* arg = capstan_switch(save, target, &task->post);
  if (san::asan()) __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
  after_switch(static_cast<PostSwitch*>(arg));
}

// Out of line: the hooked switch is never the common path.
[[gnu::noinline]] static void switch_hooked(Task* task, Capability* cap, Thread* from, Thread* to,
                                            bool from_dying, SwitchWhy why) {
  switch_impl<true>(task, cap, from, to, from_dying, why);
}

// Note [Switch hooks]
// ~~~~~~~~~~~~~~~~~~~
// Three things a switch may have to do are fixed for the whole run: write
// an event for the trace (+RTS -l), expire the next thread's timeslice at
// once (+RTS -C0), and tell ASan and TSan about the new stack.  Each was a
// load and a branch on every switch; rt.switch_hooks is their OR, set once
// at start, and a switch with none of them tests that one flag and runs a
// copy compiled without the three (switch_impl<false>).  It defaults to
// true, so a switch before run_main has decided (right after trace_start,
// in runtime/runtime.cpp) takes the complete copy.  A new hook guarded by
// `Hooks` must join that OR, or the common path would skip it.

// switch_to leaves `from` (null: the Task's scheduler context) for `to`
// (null: the scheduler context).  The caller has already requeued, blocked
// or finished `from`.  Returns when someone switches back to `from`.
// `why` says why `from` leaves, for the event trace (trace/trace.hpp).
[[gnu::always_inline]] static inline void switch_to(Task* task, Capability* cap, Thread* from,
                                                    Thread* to, bool from_dying,
                                                    SwitchWhy why = SwitchWhy::none) {
  if (rt.switch_hooks) [[unlikely]] {
    switch_hooked(task, cap, from, to, from_dying, why);
    return;
  }
  switch_impl<false>(task, cap, from, to, from_dying, why);
}

}  // namespace capstan::rts
