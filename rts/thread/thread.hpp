// thread.hpp - Thread: a green thread (GHC's TSO).
//
// A Thread is owned by exactly one party at a time (cf. Go's runtime2.go):
//  * runnable: by the run queue or inbox it sits in; its `cap` is the
//    capability whose scheduler will run it; its stack is not in use.
//  * running: by the Task (OS thread) running it on `cap`.
//  * blocked: by the queue of the object it waits on (an mvar); the waker
//    that dequeues it under that object's lock owns the right to wake it.
//    See Note [Blocking on an MVar] in schedule/park.hpp.
//  * finished: by the capability that recycles it after switching away.
// Queueing never allocates: `link` is the intrusive run-queue/inbox link.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "capstan/detail/async_core.hpp"
#include "capstan/detail/bridge.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "primitives/spinlock.hpp"

namespace capstan::rts {

struct Capability;
struct Task;

enum class ThreadState : std::uint8_t { runnable, running, blocked, finished };
// (A maker waiting for its stolen spark is on_mvar: it parks at a gate,
// waiter::spark; Note [Completing a stolen spark] in sparks/sparks.cpp.)
enum class WhyBlocked : std::uint8_t { not_blocked, on_mvar, on_shutdown };

// What an IO-manager wait parks for (it parks on an mvar: the IO manager
// fills it); for thread dumps, the event trace and gdb, never control flow.
enum class IoWait : std::uint8_t { none, sleep, fd_read, fd_write, close_fd };

// A thread's mask state (capstan::mask_state's values).
enum class Mask : std::uint8_t { unmasked, interruptible, uninterruptible };

// ThrowMsg: an exception thrown to a thread (GHC's MessageThrowTo), and
// TimeoutFrame: a timeout() in progress; both live in their owner's frame.
// See Note [Raising asynchronously] in schedule/raise.cpp.
using ThrowMsg = detail::throw_msg;
using TimeoutFrame = detail::timeout_frame;

// The C++ runtime's per-thread exception bookkeeping (libstdc++/libc++abi
// __cxa_eh_globals): swapped at every switch so a switch inside a catch
// block cannot corrupt another thread's.
struct EhGlobals {
  void* caught = nullptr;
  unsigned int uncaught = 0;
};

// Note [The hand-off's cache lines]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every field an mvar hand-off touches - blocking (park_wait,
// publish_wait, park_current), waking (serve, wake, the run queue), and
// the switch on both sides (switch_to) - lives in the first 128 bytes, and
// a Thread starts on a cache line: a hop touches two adjacent lines of each
// thread, which the L2's pair prefetcher fetches together.  Declared in
// the order they were added, the same fields spread over five lines
// (wait_tag and last_ran_ns at 128, blocked_on and waiter at 200,
// async_pending at 240, unarmed_timeouts at 280), and ring's and
// threads003's 500 threads do not fit in L1: each hop waited on more lines
// from L2 (the figures: docs/benchmarks.md, "Core runtime").  What starting
// and ending a thread touches comes next (line 2, then the inline
// closure on line 3), then the rest (IO waits, the trace, the exception
// machinery beyond its flag).  Kept by the static_asserts under the
// struct.
struct alignas(64) Thread {
  static constexpr std::size_t kInlineClosure = 64;

  // --- line 0: the run queue, the switch and the wait ---
  void* sp = nullptr;              // saved context; null until first run
  Thread* link = nullptr;          // run queue / inbox / free list (owner: see above)
  Capability* cap = nullptr;       // capability that runs it next
  void* stack_lo = nullptr;        // usable stack [stack_lo, +size), null until first run
  Task* bound_task = nullptr;      // bound threads: the Task (OS thread) that runs them
  // What the thread is blocked on, guarded by wait_lock.
  detail::mvar_core* blocked_on = nullptr;
  detail::waiter* waiter = nullptr;
  int saved_errno = 0;
  ThreadState state = ThreadState::runnable;
  WhyBlocked why = WhyBlocked::not_blocked;
  bool locked = false;             // fork_on or bound: never migrates
  bool has_eh = false;             // eh holds saved state (inside a catch / unwinding)

  // --- line 1: the rest of what a hand-off reads or writes ---
  // When it last stopped running (switched away), on the ticker's coarse
  // clock (Runtime::coarse_now_ns, [owner]; read racily by dumps).
  std::int64_t last_ran_ns = 0;
  // The operation and primitive of the mvar_core wait in progress
  // (waiter::kind, waiter::what, in that order: copied together when it
  // parks; [owner], read racily by dumps): the waiter itself may be gone by
  // the time one looks.
  struct WaitTag {
    std::uint8_t op;    // waiter::kind
    std::uint8_t what;  // waiter::what
  } wait_tag{};
  std::atomic<bool> async_pending{false};  // [atomic] pending list non-empty (written under wait_lock)
  // Requeued while still running on its OS thread: true from just before
  // the push until the switch away has saved its context (released on the
  // landing side).  Thieves skip it: Note [Requeued while still running]
  // in schedule/steal.cpp.
  std::atomic<bool> leaving{false};
  Mask mask = Mask::unmasked;       // [owner]; read by throwers under wait_lock while blocked
  // Guards blocked_on, waiter and the fields marked [lock: wait_lock].
  SpinLock wait_lock;
  bool bound = false;              // runs only on bound_task's OS thread
  bool returning = false;          // returning from a safe call: front of the queue
  unsigned unarmed_timeouts = 0;    // [owner] frames in `timeouts` with no timer registered
  bool is_main = false;            // run()'s main thread (never killed at shutdown)
  bool spark_thread = false;       // a spark thread: it ends at shutdown, not killed
  // On one of the arena's reserve stacks: no other stack could be had at
  // its first run (Note [Running out of stacks] in storage/stack.cpp).
  // [owner: the capability running it]
  bool on_reserve = false;
  std::uint64_t id = 0;
  // Asynchronous exceptions: Note [Raising asynchronously] in schedule/raise.cpp.
  // live_id: the id while the thread is started and not finished, else 0;
  // a thrower holding wait_lock trusts a Thread* only if live_id is the id
  // it was given ([atomic]; written under wait_lock once wait locks are on).
  std::atomic<std::uint64_t> live_id{0};
  // Note [Timed takes]: the token of the timed wait in progress, 0 if none
  // ([lock: wait_lock]); tokens come from timed_next ([owner]: the thread),
  // never reset, so a stale timer never matches a later wait.
  std::uint64_t timed_seq = 0;
  EhGlobals eh;

  // --- line 2: starting and ending a thread ---
  const detail::closure_ops* ops = nullptr;
  void* closure = nullptr;         // inline_closure or heap
  std::size_t closure_align = 0;   // of a heap closure
  // Per-capability list of every live thread (home->all_lock); used to find
  // blocked threads at shutdown.  See Note [Killing a blocked thread].
  Capability* home = nullptr;
  Thread* all_prev = nullptr;
  Thread* all_next = nullptr;
  std::string* label = nullptr;    // owner: the thread itself / label_thread under all_lock
  std::uint64_t timed_next = 0;

  // --- line 3: the closure, when it fits ---
  alignas(16) unsigned char inline_closure[kInlineClosure];

  // --- the rest ---
  // An IO-manager wait in progress ([owner]; read racily by dumps: Note [A
  // thread dump is a snapshot] in thread/dump.cpp): what it waits for, and
  // the fd, or the sleep's deadline on now_ns()'s clock.
  IoWait io_wait = IoWait::none;
  std::int64_t io_arg = 0;
  // Event trace (+RTS -l) only, trace/trace.cpp: the wake-up flow that ends
  // at its next run ([waker writes before the wake, runner reads after]);
  // the start of the safe call it is in and that call's Task ([owner]);
  // whether thread_killed ended it ([owner]).
  std::uint64_t trace_flow = 0;
  std::int64_t trace_call_t0 = 0;
  unsigned trace_call_task = 0;
  bool trace_killed = false;

  ThrowMsg* pending_head = nullptr; // [lock: wait_lock] FIFO of exceptions thrown to us
  ThrowMsg* pending_tail = nullptr; // [lock: wait_lock]
  std::exception_ptr raised;        // [thrower writes, then owner] for a wait that was interrupted
  TimeoutFrame* timeouts = nullptr; // [owner] innermost timeout() in progress (io/timeouts.cpp)
  TimeoutFrame* armed = nullptr;    // [lock: wait_lock] frames with a timer registered

  void* tsan_fiber = nullptr;      // ThreadSanitizer fiber, if running under TSan
};

// See Note [The hand-off's cache lines].
static_assert(offsetof(Thread, has_eh) < 64 && offsetof(Thread, waiter) < 64 &&
              offsetof(Thread, bound_task) < 64);
static_assert(offsetof(Thread, eh) + sizeof(EhGlobals) <= 128 &&
              offsetof(Thread, unarmed_timeouts) < 128 && offsetof(Thread, wait_tag) < 128);
static_assert(offsetof(Thread, timed_next) < 192 && offsetof(Thread, inline_closure) == 192);

}  // namespace capstan::rts
