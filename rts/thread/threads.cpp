// threads.cpp - see threads.hpp.
#include "thread/threads.hpp"

#include <cstring>
#include <new>

#include <fmt/format.h>

#include "capstan/errors.hpp"

#include "primitives/fault_injection.hpp"
#include "primitives/sanitizer.hpp"
#include "runtime/runtime.hpp"
#include "task/green_thread.hpp"

namespace capstan::rts {

// Note [Thread ids]
// ~~~~~~~~~~~~~~~~~
// A thread_id is a number, unique in the process: each run of the runtime
// hands out ids above those of the runs before it (process.ids_used,
// carried from one Runtime to the next), in blocks of kIdBlock per
// capability, so that making a thread takes no shared write.  Ids of one
// run never name threads of another: an id kept from an earlier run - its
// thread ended with that run - is refused by name instead of quietly
// reaching whatever thread of this run happened to get the same number.
// 2^64 ids do not run out.
void check_thread_id(std::uint64_t id, const char* what) {
  if (id == 0)
    throw usage_error(fmt::format("{}: the default thread_id names no thread; use the id that "
                                  "fork_io, fork_on, fork_os or self() returned", what));
  if (id <= rt.first_id)
    throw usage_error(fmt::format("{}: thread id {} belongs to an earlier run of capstan::run, "
                                  "whose threads have all ended; ids are not reused", what, id));
  if (id > rt.id_blocks.load(std::memory_order_relaxed))
    throw usage_error(fmt::format("{}: no thread with id {} has been started in this run", what, id));
}

Thread* alloc_thread(std::size_t size, std::size_t align, const char* what) {
  Task* task = require_green_thread(what);
  Thread* t = task->cap->threads.get();
  if (size <= Thread::kInlineClosure && align <= 16) {
    t->closure = t->inline_closure;
  } else {
    t->closure_align = align < 16 ? 16 : align;
    t->closure = ::operator new(size, std::align_val_t(t->closure_align));
  }
  return t;
}

std::uint64_t next_id_in_block(std::uint64_t& next, std::uint64_t& end) {
  if (next == end) {
    std::uint64_t base = rt.id_blocks.fetch_add(kIdBlock, std::memory_order_relaxed);
    next = base + 1;
    end = base + kIdBlock + 1;
  }
  return next++;
}

std::uint64_t next_thread_id(Capability* cap) { return next_id_in_block(cap->next_id, cap->id_end); }

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
// Rejected: walking the thread slabs instead
// of keeping lists (no writes at all on fork and finish, but every reader
// would have to tell a live Thread from a cached one without a lock, and
// a slab's Threads belong to no capability); per-capability lists without
// a lock, written only by the home (a thread finishing elsewhere, as
// pushed threads at -N2 do, would have to send itself home to be unlinked
// and could not be recycled before).
void link_home(Capability* cap, Thread* t, bool holder) {
  t->home = cap;
  t->all_prev = nullptr;
  cap->all_lock.lock(holder && rt.bias_locks);
  t->all_next = cap->all_head;
  if (cap->all_head) cap->all_head->all_prev = t;
  cap->all_head = t;
  cap->all_lock.unlock();
}

void unlink_from_home(Thread* t, bool holder) {
  Capability* home = t->home;
  home->all_lock.lock(holder && rt.bias_locks);
  if (t->all_prev) t->all_prev->all_next = t->all_next; else home->all_head = t->all_next;
  if (t->all_next) t->all_next->all_prev = t->all_prev;
  home->all_lock.unlock();
}

Thread* create_system_thread(Capability* cap, const detail::closure_ops* ops, void* closure,
                             std::size_t closure_size, bool bound, bool locked) {
  Thread* t = cap->threads.get();
  t->closure = t->inline_closure;  // closure_size <= kInlineClosure, trivially copyable
  std::memcpy(t->inline_closure, closure, closure_size);
  t->ops = ops;
  t->id = next_thread_id(cap);
  t->live_id.store(t->id, std::memory_order_relaxed);
  t->bound = bound;
  t->is_main = bound;  // the only bound system thread is run()'s main
  t->spark_thread = !bound;  // and the only unbound ones are spark threads
  t->locked = locked;
  link_home(cap, t, /*holder=*/true);
  cap->threads_created.add();
  t->cap = cap;
  cap->run_queue.push_back(t);
  return t;
}

Thread* create_incall_thread(Task* task, Capability* home, const detail::closure_ops* ops,
                             const void* closure, std::size_t closure_size, bool holder) {
  if (fault_injection::should_fail(fault_injection::fail_incall_thread)) throw std::bad_alloc();
  Thread* t = task->threads.get();
  t->closure = t->inline_closure;  // closure_size <= kInlineClosure, trivially copyable
  std::memcpy(t->inline_closure, closure, closure_size);
  t->ops = ops;
  t->id = next_id_in_block(task->next_id, task->id_end);
  t->live_id.store(t->id, std::memory_order_relaxed);
  t->bound = t->locked = true;
  t->bound_task = task;
  t->cap = home;
  t->state = ThreadState::runnable;
  link_home(home, t, holder);
  rt.incall_threads_created.add();
  return t;
}

Thread* thread_of(detail::thread_ref r) noexcept {
  if (r.id == 0) return nullptr;
  constexpr std::uintptr_t kAddr = (std::uintptr_t{1} << 48) - 1;
  if (r.where != 0) {
    if ((r.where >> 48) != (process.epoch & 0xffff)) return nullptr;  // an earlier run's
    return reinterpret_cast<Thread*>(r.where & kAddr);
  }
  // An id made from a number: search the live threads.
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->id == r.id) {
        c->all_lock.unlock();
        return t;
      }
    }
    c->all_lock.unlock();
  }
  return nullptr;
}

detail::thread_ref ref_of(const Thread* t) noexcept {
  auto addr = reinterpret_cast<std::uintptr_t>(t);
  if (addr >> 48) return {t->id, 0};  // no room for the tag: found by search
  return {t->id, addr | (static_cast<std::uintptr_t>(process.epoch & 0xffff) << 48)};
}

}  // namespace capstan::rts
