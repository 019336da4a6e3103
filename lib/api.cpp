// api.cpp - the public green-thread API (thread.hpp, detail/bridge.hpp),
// implemented on the runtime in rts/.
#include <fmt/format.h>

#include "capstan/statistics.hpp"
#include "capstan/thread.hpp"
#include "../rts/runtime.hpp"
#include "../rts/scheduler.hpp"

namespace capstan {

using rts::Capability;
using rts::Task;
using rts::Thread;

thread_id self() {
  Task* task = rts::require_green_thread("capstan::self");
  return thread_id{task->cap->current->id};
}

void yield() { rts::yield_current(); }

unsigned current_capability() {
  Task* task = rts::require_green_thread("capstan::current_capability");
  return task->cap->no;
}

unsigned num_capabilities() {
  rts::require_green_thread("capstan::num_capabilities");
  return rts::rt.n_caps;
}

void label_thread(thread_id id, std::string_view label) {
  Task* task = rts::require_green_thread("capstan::label_thread");
  Thread* cur = task->cap->current;
  if (cur->id == id.value()) {  // the common case: labelling yourself
    if (cur->label) *cur->label = label; else cur->label = new std::string(label);
    return;
  }
  for (Capability* c : rts::rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->id != id.value()) continue;
      auto* s = new std::string(label);
      std::swap(s, t->label);
      c->all_lock.unlock();
      delete s;
      return;
    }
    c->all_lock.unlock();
  }
  // GHC's labelThread on a finished thread is a no-op; so is ours.
}

runtime_statistics statistics() {
  if (rts::my_task() && rts::rt.running.load()) return rts::snapshot_statistics();
  return rts::rt.last_stats;
}

namespace detail {

thread_slot thread_alloc(std::size_t size, std::size_t align) {
  Thread* t = rts::alloc_thread(size, align);
  return {t, t->closure};
}

void thread_discard(void* thread) noexcept { rts::discard_thread(static_cast<Thread*>(thread)); }

std::uint64_t thread_start(void* thread, const closure_ops* ops, int cap) {
  return rts::start_thread(static_cast<Thread*>(thread), ops, cap);
}

bool context_switch_pending() noexcept {
  Task* task = rts::my_task();
  return task && task->cap &&
         task->cap->context_switch.load(std::memory_order_relaxed) != 0;
}

void yield_point_slow() { rts::yield_point_slow(); }

}  // namespace detail
}  // namespace capstan
