// schedule.hpp - the scheduler (GHC's Schedule.c): what the layers above
// (sparks, mvar, foreign, io, shutdown, runtime) may ask of it.  Inside
// schedule/ the hot paths are inlined from switch.hpp and pick.hpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "capability/capability.hpp"
#include "capstan/detail/bridge.hpp"
#include "task/green_thread.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"
#include "thread/threads.hpp"
#include "trace/trace.hpp"

namespace capstan::rts {

// A forking thread yields once this many threads wait on its capability.
// See Note [Fork back-pressure] in schedule/fork.cpp.
inline constexpr std::size_t kForkBackPressure = 256;

// schedule is a Task's scheduler loop, on its native stack; returns at stop,
// when a worker is no longer needed, or when a fork_os/in-call Task's bound
// thread has finished (Note [Bound threads]).
void schedule(Task* task);

// start_thread makes an allocated thread runnable (fork_io, fork_on,
// fork_os: cap_no as in detail::thread_start); returns its id.
detail::thread_ref start_thread(Thread* t, const detail::closure_ops* ops, long long cap_no);

// switch_to_scheduler_capless leaves `cur` for the scheduler context of
// `task`, which holds no capability (a safe call returning the slow way).
void switch_to_scheduler_capless(Task* task, Thread* cur);

// move_off_bound_task: `cur`, an unbound thread running on the bound Task
// `task`, continues on a spare Task of the same capability (it goes first);
// `task` waits for its own bound thread.  See Note [Unbound threads on a
// bound Task] in foreign/safe_call.cpp.
void move_off_bound_task(Task* task, Thread* cur);

// yield_current requeues the running thread at the back and runs the next.
void yield_current();
// yield_current_because is yield_current, telling the event trace why.
void yield_current_because(SwitchWhy why);
// yield_point_slow: a safe point found its capability's context_switch set.
void yield_point_slow();

// park_current, which blocks the running thread, is in schedule/park.hpp.

// migrate_current_to moves the running (unlocked) thread to `target`: it is
// queued there, through the inbox, once its context is saved.
void migrate_current_to(Capability* target);

// wake makes a blocked thread runnable.  Exactly one party may wake a given
// blocked thread: the one that removed it from the queue it waited in.
void wake(Thread* t) noexcept;
// wake_home makes t runnable on its own capability (no wake-up affinity):
// for threads whose sparks wait in that capability's pool.
void wake_home(Thread* t) noexcept;

// check_killed: a shutdown checkpoint for t, the running thread.  Throws
// thread_killed (or abandons t) if the runtime is shutting down and t may
// be killed.  See Note [Shutdown checkpoints] in schedule/yield.cpp.
void check_killed(Thread* t);

}  // namespace capstan::rts
