// green_thread.hpp - "is the caller a green thread?": the one check every
// runtime call that needs a running green thread makes.
//
// A caller runs a green thread when its OS thread is a Task (my_task())
// that holds a capability whose `current` thread is running - not its
// scheduler context, not a Task inside a safe call (which holds no
// capability), not a foreign OS thread.
#pragma once

#include "capability/capability.hpp"
#include "task/task.hpp"

namespace capstan::rts {

// green_task_before_switch: the caller's Task if it runs a green thread,
// else null.  Inlined for hot paths; the result may be used only before
// the caller's first switch (Note [TLS across a switch] in task/task.hpp).
inline Task* green_task_before_switch() noexcept {
  Task* t = my_task_before_switch();
  return t && t->cap && t->cap->current ? t : nullptr;
}

// green_task: the same, through the out-of-line my_task(): safe to call
// again after a switch.
Task* green_task() noexcept;

// require_green_thread returns green_task(), or throws usage_error naming
// `what` (e.g. "capstan::yield") and what is accepted instead: a call from
// inside safe_call is told to use call_in, anything else to call from
// inside capstan::run.
Task* require_green_thread(const char* what);
[[noreturn]] void throw_not_green(const char* what);

}  // namespace capstan::rts
