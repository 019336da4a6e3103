// event.hpp - Event: a one-shot, auto-reset wake-up for the runtime's own
// green threads (a green event, not a POSIX signal).
//
// Like an mvar<char> without the safe point that every user-facing runtime
// call passes: the runtime signals it from places where a safe point would
// be wrong (a finishing thread, the ticker thread).  notify() from any
// thread sets the bit and wakes the waiter, if any; wait() blocks the
// calling green thread until the bit is set, then clears it.
#pragma once

#include "capstan/detail/mvar_core.hpp"

namespace capstan::rts {

class Event {
 public:
  // Notified from other OS threads by design (the ticker): never biased
  // (Note [Biased locks] in capstan/detail/mvar_core.hpp).
  Event() noexcept { core_.share(); }
  void notify() noexcept {
    detail::wake_list woken;
    core_.lock();
    if (detail::waiter* w = core_.front()) woken.add(core_.serve(*w));
    else set_ = true;
    core_.unlock();
    woken.wake_all();  // after unlock: see Note [Waking after unlock]
  }
  void wait() {
    core_.lock();
    if (set_) {
      set_ = false;
      core_.unlock();
      return;
    }
    detail::waiter w(detail::waiter::runtime_event);
    core_.enqueue(w);
    core_.park(w);  // only main waits (run_main): shutdown never kills it
  }

 private:
  detail::mvar_core core_;
  bool set_ = false;  // guarded by core_'s lock
};

}  // namespace capstan::rts
