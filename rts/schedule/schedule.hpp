// scheduler.hpp - the scheduler: switching, requeueing, waking, idling.
#pragma once

#include <cstddef>
#include <cstdint>

#include "capability/capability.hpp"
#include "capstan/detail/bridge.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

// A capability pushes work to idle ones when this many threads wait in its
// run queue.  See Note [Pushing work].
inline constexpr std::size_t kPushThreshold = 4;
// A forking thread yields once this many threads wait on its capability.
// See Note [Fork back-pressure].
inline constexpr std::size_t kForkBackPressure = 256;

// The running green thread's Task/Capability, or a usage_error naming `what`.
Task* require_green_thread(const char* what);
[[noreturn]] void throw_not_green(const char* what);

Thread* alloc_thread(std::size_t closure_size, std::size_t closure_align, const char* what);
void discard_thread(Thread* t) noexcept;
std::uint64_t start_thread(Thread* t, const detail::closure_ops* ops, int cap_no);
// Creates a thread for the runtime's own use on `cap` (no current thread needed).
Thread* create_system_thread(Capability* cap, const detail::closure_ops* ops, void* closure,
                             std::size_t closure_size, bool bound, bool locked = true);

// schedule is a Task's scheduler loop, on its native stack; returns at stop,
// when a worker is no longer needed, or when a fork_os/in-call Task's bound
// thread has finished (Note [Bound threads]).
void schedule(Task* task);

// drain_inbox_now moves the inbox into the run queue (the holder only).
void drain_inbox_now(Capability* cap);

// switch_to_scheduler_capless leaves `cur` for the scheduler context of
// `task`, which holds no capability (a safe call returning the slow way).
void switch_to_scheduler_capless(Task* task, Thread* cur);

// move_off_bound_task: `cur`, an unbound thread running on the bound Task
// `task`, continues on a spare Task of the same capability (it goes first);
// `task` waits for its own bound thread.  See Note [Unbound threads on a
// bound Task] in foreign/safe_call.cpp.
void move_off_bound_task(Task* task, Thread* cur);

// create_incall_thread makes a thread bound to `task`, homed on `home`,
// for call_in (the caller need not hold a capability).
Thread* create_incall_thread(Task* task, Capability* home, const detail::closure_ops* ops,
                             const void* closure, std::size_t closure_size);

// yield_current requeues the running thread at the back and runs the next.
void yield_current();
void yield_point_slow();

// park_current blocks `cur`, the thread `task` is running; `unlock_after`
// is released once its context is saved.  See Note [Blocking on an MVar].
void park_current(Task* task, Thread* cur, std::atomic<bool>* unlock_after);

// migrate_current_to moves the running (unlocked) thread to `target`: it is
// queued there, through the inbox, once its context is saved.
void migrate_current_to(Capability* target);

// wake makes a blocked thread runnable.  Exactly one party may wake a given
// blocked thread: the one that removed it from the queue it waited in.
void wake(Thread* t) noexcept;
// wake_home makes t runnable on its own capability (no wake-up affinity):
// for threads whose sparks wait in that capability's pool.
void wake_home(Thread* t) noexcept;

// interrupt_capability asks `cap`'s running thread to return to the
// scheduler at its next safe point, keeping its place at the front.
void interrupt_capability(Capability* cap) noexcept;
// request_context_switch expires `cap`'s timeslice (what the ticker does).
void request_context_switch(Capability* cap) noexcept;

// request_kill wakes t with thread_killed if it is blocked on an mvar;
// returns false if it should be retried later.  Note [Killing a blocked thread].
bool request_kill(Thread* t) noexcept;

// notify_capability wakes `cap`'s Task if it sleeps.  Note [Sleeping capabilities].
void notify_capability(Capability* cap) noexcept;

// Throws thread_killed if the runtime is shutting down and t may be killed.
void check_killed(Thread* t);

}  // namespace capstan::rts
