// thread_api.cpp - the public questions a green thread asks about itself
// (capstan/thread.hpp: self, is_bound, current_capability,
// num_capabilities, label_thread).  Forking is schedule/fork.cpp, yield and
// safe points schedule/yield.cpp, statistics() stats/stats.cpp.
#include <string>
#include <utility>

#include "capstan/thread.hpp"
#include "runtime/runtime.hpp"
#include "thread/threads.hpp"
#include "task/green_thread.hpp"
#include "trace/trace.hpp"

namespace capstan {

using rts::Capability;
using rts::Task;
using rts::Thread;

thread_id self() {
  Task* task = rts::require_green_thread("capstan::self");
  thread_id id{rts::ref_of(task->cap->current)};
  detail::safe_point();
  return id;
}

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
  // As state_of and kill_thread: an id that names no thread is a mistake;
  // a finished thread's is not (labelling it does nothing, as in GHC).
  rts::check_thread_id(id.value(), "capstan::label_thread");
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
  if (found && rts::rt.tracing) [[unlikely]]
    rts::trace_label(task->cap, id.value(), label);
  delete fresh;  // the old label, or ours if the thread has finished (a no-op, as GHC's)
  detail::safe_point();
}

}  // namespace capstan
