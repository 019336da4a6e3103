// handover.hpp - moving capabilities between Tasks, and the spare Tasks
// that take one over while its Task is in a safe call.
// See Note [Handing over a capability] in handover.cpp.
#pragma once

#include "capability/capability.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"

namespace capstan::rts {

// give passes `cap`, which the caller holds (or has just claimed), to `to`,
// which must be waiting in wait_for_capability; `first` (a thread bound to
// `to`, or null) is what it runs first.  The caller must not touch cap after.
void give_capability_to_task(Task* to, Capability* cap, Thread* first) noexcept;

// wait_for_capability parks the capless `task` until someone gives it a
// capability (then task->cap is set; returns true) or the runtime stops
// (returns false).
bool wait_for_capability(Task* task) noexcept;

// give_capability_to_spare passes `cap`, which the caller holds, to a spare Task of
// cap (waking one, or starting a new OS thread) so its work goes on.  If
// the OS refuses the thread, cap goes to a bound thread's Task or back to
// free, watched by the ticker (Note [No OS thread for a spare] in
// handover.cpp); after the stop it is released.  `handed`, if given, is a
// counter of cap's that counts a hand-over to a spare: bumped while the
// caller still holds cap, so a reader who sees the spare's work sees the
// count (the ticker's safe_call_handoffs).
void give_capability_to_spare(Capability* cap, OwnerCounter* handed = nullptr) noexcept;

// release_capability gives up the capability `task` holds for good: to the
// Task a runnable bound thread needs, to a spare if there is work, else it
// becomes free.
void release_capability(Task* task) noexcept;

// try_grab_capability takes a free capability: true if the caller now holds it.
bool try_grab_capability(Capability* cap) noexcept;

// become_spare files the capless worker `task` as a spare of its last
// capability; false if that capability has enough spares (the worker exits).
bool become_spare(Task* task) noexcept;

// notify_capability tells `cap` that work was sent to its inbox: unparks
// its Task if it sleeps, or grabs it if it is free and gives it to a spare.
// See Note [Sleeping capabilities] in schedule/idle.cpp.
void notify_capability(Capability* cap) noexcept;

// Installs `task` on the calling OS thread as holder of `cap`.
void take_capability(Task* task, Capability* cap) noexcept;
// here_of is what detail::tl_here (capstan/detail/bridge.hpp) holds while
// the calling OS thread holds `cap` (Note [Biased locks] for bias_owner).
inline detail::capability_here here_of(Capability* cap) noexcept {
  return {&cap->sparks, &cap->context_switch, rt.bias_locks};
}
// drop_capability undoes take_capability: `task` (on its own OS thread)
// stops holding its capability, which it returns; the caller then passes
// it on (give, give_capability_to_spare) or releases it.
Capability* drop_capability(Task* task) noexcept;

}  // namespace capstan::rts
