// threads.hpp - making and unmaking Thread objects (GHC's Threads.c):
// allocation from the slabs, ids, the per-capability list of live threads,
// and teardown.  Making a thread *runnable* and running it is the
// scheduler's (schedule/fork.cpp, schedule/switch.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <new>

#include "capability/capability.hpp"
#include "primitives/sanitizer.hpp"
#include "runtime/runtime.hpp"
#include "capstan/detail/bridge.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

// alloc_thread takes a Thread object on the calling green thread's
// capability, with closure storage of `closure_size` bytes (inline when
// small); `what` names the public call in the error off a green thread.
Thread* alloc_thread(std::size_t closure_size, std::size_t closure_align, const char* what);

// free_thread_resources, discard_thread and recycle are inline: a thread's
// finish recycles it on the landing side of the switch (after_switch), and
// that path stays within one translation unit.

// free_thread_resources frees what a Thread owns besides its stack and
// object: a heap closure, its label, its TSan fiber.  The one teardown,
// used by discard_thread (a thread that finished or never started) and by
// the reclaiming of abandoned threads (shutdown/shutdown.cpp).
inline void free_thread_resources(Thread* t) noexcept {
  if (t->closure && t->closure != t->inline_closure)
    ::operator delete(t->closure, std::align_val_t(t->closure_align));
  t->closure = nullptr;
  delete t->label;
  t->label = nullptr;
  if (t->tsan_fiber) __tsan_destroy_fiber(t->tsan_fiber);
  t->tsan_fiber = nullptr;
}

// reset_thread tears t down to a pristine object, ready for reuse.
inline void reset_thread(Thread* t) noexcept {
  free_thread_resources(t);
  // Back to a pristine state for reuse, field by field: the object cannot
  // be rebuilt whole, because a stale mvar timer may still lock wait_lock
  // and compare timed_seq, and timed_next must never go back (Note [Timed
  // takes] in mvar/mvar_core.cpp).
  t->sp = nullptr;
  t->stack_lo = nullptr;
  t->closure_align = 0;
  t->locked = t->bound = t->is_main = t->returning = t->on_reserve = t->spark_thread = false;
  t->bound_task = nullptr;
  t->saved_errno = 0;
  t->eh = EhGlobals{};
  t->state = ThreadState::runnable;
  t->why = WhyBlocked::not_blocked;
  t->blocked_on = nullptr;
  t->waiter = nullptr;
  t->has_eh = false;
  t->mask = Mask::unmasked;
  if (t->raised) [[unlikely]] t->raised = nullptr;  // assigning always costs a swap and a test
  t->timeouts = nullptr;
  t->unarmed_timeouts = 0;
  t->io_wait = IoWait::none;
  t->last_ran_ns = 0;
  t->trace_flow = 0;
  t->trace_call_t0 = 0;
  t->trace_killed = false;
}

// discard_thread tears t down and returns the object to the calling Task's
// capability (or the shared depot off a capability).
inline void discard_thread(Thread* t) noexcept {
  reset_thread(t);
  Task* task = my_task();
  if (task && task->cap) task->cap->threads.put(t);
  else rt.depot.give_batch(t, 1);
}

// recycle returns a finished thread's stack and object to `cap`, whose
// holder is the caller.  See Note [Finishing a thread] in schedule/fork.cpp.
static inline void recycle(Capability* cap, Thread* t) noexcept {
  if (t->on_reserve) [[unlikely]] rt.arena.return_reserve(t->stack_lo);
  else cap->stacks.put(t->stack_lo);
  cap->stacks_freed.add();
  reset_thread(t);
  cap->threads.put(t);  // the caller holds cap: no need to look it up
}

// Ids: unique in the process, handed out in blocks of kIdBlock (Note
// [Thread ids] in threads.cpp).
// next_id_in_block: the next id of a block, taking a fresh block (out of
// line) when it is used up.
std::uint64_t refill_id_block(IdBlock& b);
inline std::uint64_t next_id_in_block(IdBlock& b) {
  std::uint64_t n = b.next.load(std::memory_order_relaxed);
  if (n == b.end.load(std::memory_order_relaxed)) [[unlikely]] return refill_id_block(b);
  b.next.store(n + 1, std::memory_order_relaxed);
  return n;
}
inline std::uint64_t next_thread_id(Capability* cap) { return next_id_in_block(cap->ids); }

// Note [Home lists]
// ~~~~~~~~~~~~~~~~~
// Every live thread is on the list of its home capability (the one that
// forked it), so that shutdown, deadlock detection, the thread dump and
// label_thread can find threads that are on no queue.  A thread is linked
// as it is forked and unlinked as it finishes, wherever it runs then, so
// the list has a lock.  Its writers are nearly always the home
// capability's holder, and in a run with one capability always are but
// for an in-call that has not got the capability: the lock is biased to
// the holder (Note [Biased spin locks] in primitives/biased_spinlock.hpp),
// which saves a thread's fork and finish their only locked instructions
// at -N1.  Its readers are rare (a dump, a hog warning, a shutdown sweep
// from the holder's own thread) and pay a membarrier when they are not the
// holder.  The callers say whether they hold the capability
// (link_home's holder), rather than the lock asking the thread-local:
// the runtime is built position-independent, where that read is a call.
// Rejected: walking the thread slabs instead of keeping lists (no writes
// at all on fork and finish, but every reader would have to tell a live
// Thread from a cached one without a lock, and a slab's Threads belong to
// no capability); per-capability lists without a lock, written only by
// the home (a thread finishing elsewhere, as pushed threads at -N2 do,
// would have to send itself home to be unlinked and could not be
// recycled before).

// link_home / unlink_from_home put t on / take it off its home's list of
// live threads (found by shutdown, label_thread).  holder: the caller
// holds that capability (the lock's owner, if it is biased).
// Inline: a thread's fork and finish.
inline void link_home(Capability* cap, Thread* t, bool holder) {
  t->home = cap;
  t->all_prev = nullptr;
  cap->all_lock.lock(holder);
  t->all_next = cap->all_head;
  if (cap->all_head) cap->all_head->all_prev = t;
  cap->all_head = t;
  cap->all_lock.unlock();
}

inline void unlink_from_home(Thread* t, bool holder) {
  Capability* home = t->home;
  home->all_lock.lock(holder);
  if (t->all_prev) t->all_prev->all_next = t->all_next; else home->all_head = t->all_next;
  if (t->all_next) t->all_next->all_prev = t->all_prev;
  home->all_lock.unlock();
}

// thread_of finds the live Thread named by r, or null if it has finished or
// r is from another run.  The result must still be checked against
// live_id under its wait_lock (it may finish at any moment).
Thread* thread_of(detail::thread_ref r) noexcept;

// check_thread_id throws the usage_error, naming the call `what`, for an
// id that names no thread of this run (the default id, or one beyond every
// id handed out); a finished thread's id passes.
void check_thread_id(std::uint64_t id, const char* what);

// ref_of names a started thread t.
inline detail::thread_ref ref_of(const Thread* t) noexcept {
  auto addr = reinterpret_cast<std::uintptr_t>(t);
  if (addr >> 48) return {t->id, 0};  // no room for the tag: found by search
  return {t->id, addr | (static_cast<std::uintptr_t>(process.epoch & 0xffff) << 48)};
}

// create_system_thread makes a thread for the runtime's own use on `cap`
// (run()'s main, a spark thread), queued at the back of cap's run queue;
// the caller holds cap.  The closure is copied inline (trivially copyable,
// at most Thread::kInlineClosure bytes).
Thread* create_system_thread(Capability* cap, const detail::closure_ops* ops, void* closure,
                             std::size_t closure_size, bool bound, bool locked = true);

// create_incall_thread makes a thread bound to `task`, homed on `home`,
// for call_in (the caller need not hold a capability: holder says whether
// it has claimed `home`); not queued.
Thread* create_incall_thread(Task* task, Capability* home, const detail::closure_ops* ops,
                             const void* closure, std::size_t closure_size, bool holder);

}  // namespace capstan::rts
