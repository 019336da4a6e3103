// api.cpp - the public green-thread API (thread.hpp, detail/bridge.hpp),
// implemented on the runtime in rts/.
#include <fmt/format.h>

#include <mutex>

#include "capstan/errors.hpp"
#include "capstan/foreign.hpp"

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
  thread_id id{task->cap->current->id};
  detail::safe_point();
  return id;
}

void yield() { rts::yield_current(); }

bool is_bound() {
  Task* task = rts::require_green_thread("capstan::is_bound");
  bool b = task->cap->current->bound;
  detail::safe_point();
  return b;
}

unsigned current_capability() {
  detail::safe_point();  // first: the answer must hold when we return
  Task* task = rts::require_green_thread("capstan::current_capability");
  return task->cap->no;
}

unsigned num_capabilities() {
  rts::require_green_thread("capstan::num_capabilities");
  detail::safe_point();
  return rts::rt.n_caps;
}

void label_thread(thread_id id, std::string_view label) {
  Task* task = rts::require_green_thread("capstan::label_thread");
  Thread* cur = task->cap->current;
  // Labels are read and written under the thread's home all_lock.
  auto* fresh = new std::string(label);
  auto set = [&fresh](Thread* t) { std::swap(fresh, t->label); };
  bool found = false;
  if (cur->id == id.value()) {  // the common case: labelling yourself
    cur->home->all_lock.lock();
    set(cur);
    cur->home->all_lock.unlock();
    found = true;
  }
  for (std::size_t i = 0; !found && i < rts::rt.caps.size(); ++i) {
    Capability* c = rts::rt.caps[i];
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (t->id == id.value()) {
        set(t);
        found = true;
        break;
      }
    }
    c->all_lock.unlock();
  }
  delete fresh;  // the old label, or ours if the thread has finished (a no-op, as GHC's)
  detail::safe_point();
}

runtime_statistics statistics() {
  if (rts::my_task() && rts::rt.running.load()) {
    auto s = rts::snapshot_statistics();
    detail::safe_point();
    return s;
  }
  std::lock_guard<std::mutex> g(rts::rt.last_stats_mu);
  if (rts::rt.running.load())
    throw usage_error("capstan::statistics: called from an OS thread that is not running a "
                      "green thread while a runtime runs; call it from inside capstan::run, "
                      "or after run() returns for the final counters");
  return rts::rt.last_stats;
}

namespace detail {

thread_slot thread_alloc(std::size_t size, std::size_t align, int cap) {
  Thread* t = rts::alloc_thread(size, align,
                                cap == kBoundOsThread ? "capstan::fork_os"
                                : cap < 0             ? "capstan::fork_io"
                                                      : "capstan::fork_on");
  return {t, t->closure};
}

void thread_discard(Thread* thread) noexcept { rts::discard_thread(thread); }

std::uint64_t thread_start(Thread* thread, const closure_ops* ops, int cap) {
  return rts::start_thread(thread, ops, cap);
}

void safe_point() {
  Task* task = rts::my_task_before_switch();  // no switch before its last use
  if (task && task->cap && task->cap->current &&
      task->cap->context_switch.load(std::memory_order_relaxed) != 0) [[unlikely]]
    rts::yield_point_slow();
}

}  // namespace detail
}  // namespace capstan
