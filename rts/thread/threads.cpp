// threads.cpp - see threads.hpp.
#include "thread/threads.hpp"

#include <cstring>
#include <mutex>
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
//
// An id of this run names a thread that was started unless it lies in a
// block whose owner has not reached it yet: each capability and each
// in-call Task keeps its current block in an IdBlock it writes with
// relaxed stores, and check_thread_id reads them all.  A racy pair of
// reads cannot refuse an id that was handed out: whoever holds such an id
// learned it after its owner's store of a `next` above it, so reads `next`
// at least that large, or the `end` of a later block (refill stores `next`
// first), which does not contain it.  An id that was never handed out can
// slip through only while its owner hands it out, and then it is reported
// as the thread it just became.
namespace {
bool handed_out(std::uint64_t id) {
  for (Capability* c : rt.caps)
    if (c->ids.unreached(id)) return false;
  // Relaxed is enough: whoever holds an in-call thread's id learned it
  // after that thread's Task set the flag, and an id never handed out is
  // in no block yet either way.
  if (!rt.task_id_blocks.load(std::memory_order_relaxed)) return true;
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (auto& t : rt.tasks)
    if (t->ids.unreached(id)) return false;
  return true;
}
}  // namespace

void check_thread_id(std::uint64_t id, const char* what) {
  if (id == 0)
    throw usage_error(fmt::format("{}: the default thread_id names no thread; use the id that "
                                  "fork_io, fork_on, fork_os or self() returned", what));
  if (id <= rt.first_id)
    throw usage_error(fmt::format("{}: thread id {} belongs to an earlier run of capstan::run, "
                                  "whose threads have all ended; ids are not reused", what, id));
  if (id > rt.id_blocks.load(std::memory_order_relaxed) || !handed_out(id))
    throw usage_error(fmt::format("{}: no thread with id {} has been started in this run", what, id));
}

Thread* alloc_thread(std::size_t size, std::size_t align, const char* what) {
  Task* task = green_task_before_switch();  // nothing here switches
  if (!task) [[unlikely]] task = require_green_thread(what);  // throws
  Thread* t = task->cap->threads.get();
  if (size <= Thread::kInlineClosure && align <= 16) {
    t->closure = t->inline_closure;
  } else {
    t->closure_align = align < 16 ? 16 : align;
    t->closure = ::operator new(size, std::align_val_t(t->closure_align));
  }
  return t;
}

std::uint64_t refill_id_block(IdBlock& b) {
  std::uint64_t base = rt.id_blocks.fetch_add(kIdBlock, std::memory_order_relaxed);
  // next first: a reader that sees the new end with the old next takes no
  // id of the new block for handed out (see check_thread_id).
  b.next.store(base + 2, std::memory_order_relaxed);
  b.end.store(base + kIdBlock + 1, std::memory_order_relaxed);
  return base + 1;
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
  if (!rt.task_id_blocks.load(std::memory_order_relaxed)) [[unlikely]]
    rt.task_id_blocks.store(true, std::memory_order_relaxed);
  t->id = next_id_in_block(task->ids);
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

}  // namespace capstan::rts
