// green_thread.cpp - see green_thread.hpp.
#include "task/green_thread.hpp"

#include <string>

#include "capstan/errors.hpp"

namespace capstan::rts {

Task* green_task() noexcept {
  Task* t = my_task();
  return t && t->cap && t->cap->current ? t : nullptr;
}

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

}  // namespace capstan::rts
