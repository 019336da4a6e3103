// mvar_core.cpp - the runtime half of mvar<T>: parking and serving waiters.
// See Note [Blocking on an MVar] in schedule/park.hpp and Note [Killing a
// blocked thread] in shutdown/shutdown.cpp.
#include "capstan/detail/mvar_core.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "capstan/errors.hpp"
#include "capstan/mvar.hpp"
#include "io/io_manager.hpp"
#include "io/timeouts.hpp"
#include "primitives/runtime_work.hpp"
#include "primitives/spin.hpp"
#include "runtime/runtime.hpp"
#include "schedule/park.hpp"
#include "schedule/raise.hpp"
#include "schedule/raise_killed.hpp"
#include "schedule/schedule.hpp"
#include "task/green_thread.hpp"
#include "thread/dump.hpp"

namespace capstan::detail {

using rts::Thread;

void spin_turn(unsigned& turns) noexcept { rts::spin_turn(turns); }

// Note [Biased locks] in capstan/detail/mvar_core.hpp.
std::atomic<bool> bias_births{true};
namespace {
std::atomic<std::uint64_t> revocations{0};  // this run's, for bias_births
// A run that has revoked this many biased mvars makes new ones shared
// from the start (Note [Biased locks]).
constexpr std::uint64_t kMaxRevocations = 4096;
}  // namespace

__attribute__((noinline)) bool current_bias_owner() noexcept {
  asm volatile("" ::: "memory");  // as my_task(): never treated as pure
  return tl_here.bias_owner;
}

// As held_word, without the call bias_owner_here makes in position-
// independent code: park reads the thread-local before its switch.
inline std::atomic<bool>* mvar_core::held_word_rts() noexcept {
  return tl_here.bias_owner && owner_in_.load(std::memory_order_relaxed) ? &owner_in_ : &locked_;
}

void start_bias_epoch() noexcept {
  revocations.store(0, std::memory_order_relaxed);
  bias_births.store(true, std::memory_order_relaxed);
}

std::uint64_t lock_revocations() noexcept { return revocations.load(std::memory_order_relaxed); }

bool mvar_core::try_lock_biased() noexcept {
  if (tl_here.bias_owner && owner_in_.load(std::memory_order_relaxed)) return false;  // its own
  if (state_.load(std::memory_order_relaxed) == kBiased && enter_biased()) return true;
  if (!revoke(/*wait=*/false)) return false;
  return !locked_.exchange(true, std::memory_order_acquire);
}

bool mvar_core::revoke(bool wait) noexcept {
  if (state_.load(std::memory_order_acquire) == kShared) return true;
  // Steps 1 and 2, run by every revoker that finds the bias not yet
  // revoked for good.  A biased mvar exists only if a run registered the
  // process for membarrier, so the call cannot fail.
  std::uint8_t biased = kBiased;
  state_.compare_exchange_strong(biased, kRevoking, std::memory_order_seq_cst);
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  for (rts::SpinWait spin; owner_in_.load(std::memory_order_acquire); spin.turn())  // step 3
    if (!wait) return false;  // inside: the caller retries
  // Step 4; the revocation is counted once, whoever finishes it.
  if (state_.exchange(kShared, std::memory_order_acq_rel) != kShared &&
      revocations.fetch_add(1, std::memory_order_relaxed) + 1 >= kMaxRevocations)
    bias_births.store(false, std::memory_order_relaxed);
  return true;
}

bool spin_before_blocking() noexcept {
  if (rts::rt.n_cpus < 2 || rts::rt.n_caps < 2) return false;
  rts::Task* task = rts::green_task();
  if (!task) return false;
  return !rts::has_threads(task->cap);
}

std::size_t memory_limit_bytes() noexcept {
  struct sysinfo si {};
  if (::sysinfo(&si) != 0) {  // physical memory alone, else no more than the address space
    long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
    return static_cast<std::size_t>(PTRDIFF_MAX);
  }
  unsigned __int128 total = (static_cast<unsigned __int128>(si.totalram) + si.totalswap) * si.mem_unit;
  return total > SIZE_MAX ? SIZE_MAX : static_cast<std::size_t>(total);
}

// A primitive's lock is only ever held by the runtime's code, but not
// always briefly: a latch, barrier or notify_all serves every waiter under
// it (50,000 threads released by one count_down hold it 20 ms here).  A
// thread that has waited kSpinTurns turns for it and is yielding its OS
// thread marks its capability as inside the runtime's loop until it gets
// the lock, so that the hog warning does not name it (Note [Warning about
// a hog] in schedule/hog_warning.cpp).
void mvar_core::lock_slow() noexcept {
  if (state_.load(std::memory_order_acquire) != kShared) revoke(/*wait=*/true);  // Note [Biased locks]
  unsigned turns = 0;
  for (;; rts::spin_turn(turns)) {
    if (!locked_.load(std::memory_order_relaxed) && try_lock()) return;
    if (turns == rts::kSpinTurns) [[unlikely]] break;
  }
  rts::Task* task = rts::my_task();
  rts::Capability* cap = task ? task->cap : nullptr;  // none on a plain OS thread
  rts::RuntimeWork mark(cap ? &cap->runtime_loop : nullptr);
  for (;; rts::spin_turn(turns))
    if (!locked_.load(std::memory_order_relaxed) && try_lock()) return;
}

namespace {

// A blocking call is a shutdown checkpoint (Note [Shutdown checkpoints]):
// a thread that may be killed leaves the queue and meets thread_killed
// instead of parking.  m is locked, with w enqueued.
void shutdown_checkpoint(mvar_core& m, waiter& w, Thread* cur) {
  // Note [Shutdown and uninterruptible_mask] in schedule/yield.cpp.
  if (cur->is_main || std::uncaught_exceptions() != 0 || cur->mask == rts::Mask::uninterruptible)
    return;
  wake_list regranted;  // Note [Leaving the shared_mutex queue]
  leave_queue(m, w, regranted);
  m.unlock();
  regranted.wake_all();
  rts::check_killed(cur);  // does not return
}

// publish_wait records that cur waits on m with w (m locked, w enqueued)
// - or, if an exception thrown to cur may be raised at this blocking call,
// takes w back out, unlocks m and raises it.  Deciding under wait_lock is
// what makes a racing thrower either see the wait or leave its message
// for us (Note [Raising asynchronously] in schedule/raise.cpp).
// The locked half is out of line; the common half is inlined into each wait.
void publish_wait_locked(mvar_core& m, waiter& w, Thread* cur, std::uint64_t timed_token);
[[gnu::always_inline]] inline void publish_wait(mvar_core& m, waiter& w, rts::Capability* cap,
                                                Thread* cur, std::uint64_t timed_token) {
  w.thread = cur;
  // For dumps and the trace only: kind and what, adjacent in both, in one
  // two-byte copy (two byte copies cost four instructions per block).
  static_assert(offsetof(waiter, what) == offsetof(waiter, kind) + 1 &&
                sizeof(rts::Thread::WaitTag) == 2);
  std::memcpy(&cur->wait_tag, &w.kind, 2);
  if (!w.timed && rts::begin_unlocked_wait_write(cap)) [[likely]] {
    // Nobody has thrown to anyone yet (throwing turns the locks on first).
    cur->blocked_on = &m;
    cur->waiter = &w;
    rts::end_unlocked_wait_write(cap);
    return;
  }
  publish_wait_locked(m, w, cur, timed_token);
}
[[gnu::noinline]] void publish_wait_locked(mvar_core& m, waiter& w, Thread* cur,
                                           std::uint64_t timed_token) {
  cur->wait_lock.lock();  // Note [Killing a blocked thread]
  if (cur->async_pending.load(std::memory_order_relaxed) && !w.shielded) [[unlikely]] {
    if (rts::ThrowMsg* msg = rts::pop_raisable(cur, true)) {
      cur->wait_lock.unlock();
      wake_list regranted;  // Note [Leaving the shared_mutex queue]
      leave_queue(m, w, regranted);
      m.unlock();
      regranted.wake_all();
      rts::raise_msg(msg);
    }
  }
  cur->blocked_on = &m;
  cur->waiter = &w;
  cur->timed_seq = timed_token;
  cur->wait_lock.unlock();
}

// Note [A timer that cannot be had]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A wait that needs a timer - take_for and every timed wait built on
// park_timed_wait, and any wait of a thread inside timeout(), whose timer
// is armed only when it first blocks (Note [Timeouts]) - asks the IO
// manager for it while holding the primitive's lock with its waiter
// queued.  That can fail: the IO manager may not start (no fds left: a
// std::system_error naming the step), or memory may run out.  The
// exception must leave the primitive as the wait found it, or its next
// user spins on a lock nobody will release: so the waiter leaves the
// queue (re-running a shared_mutex's grant: Note [Leaving the shared_mutex
// queue]), the lock is released, and only then does the exception go on.
// take_for's timer is asked for after the wait is published (its expiry
// must find it: Note [Timed takes]), so that publication is undone first,
// under wait_lock, as a thrower or an expiry reads it.  Tested by
// IoManagerLifeCycle.ATimedWaitWhoseTimerFailsLeavesThePrimitiveUsable.
[[gnu::cold, gnu::noinline]] void leave_for_exception(mvar_core& m, waiter& w) noexcept {
  wake_list regranted;  // Note [Leaving the shared_mutex queue]
  leave_queue(m, w, regranted);
  m.unlock();
  regranted.wake_all();
}

[[gnu::cold, gnu::noinline]] void arm_timeouts_or_leave(mvar_core& m, waiter& w, Thread* cur) {
  try {
    rts::arm_timeouts(cur);  // io/timeouts.hpp
  } catch (...) {
    leave_for_exception(m, w);
    throw;
  }
}

}  // namespace

namespace {

// throw_orphaned: the exception for a waiter whose primitive was destroyed.
// Its message is built here, not in raise_outcome: see Note [A kill's
// frames have no cleanups].
[[noreturn, gnu::cold, gnu::noinline]] void throw_orphaned(const waiter& w) {
  // GHC's message for an mvar; the primitive's name for the rest.
  if (w.what == waiter::mvar) throw blocked_indefinitely{};
  throw blocked_indefinitely(fmt::format(
      "thread blocked indefinitely in a {}: what it waited on was destroyed",
      rts::what_name(w.what, w.kind)));
}

}  // namespace

// raise_outcome: the throwing half of park and park_timed (Note [Throwing
// from the caller's frame] in detail/mvar_core.hpp).
//
// Note [A kill's frames have no cleanups]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Every kill of a blocked thread throws from here (raise_killed walks the
// stack once: Note [Raising thread_killed in one walk] in
// schedule/raise_killed.cpp; the other exceptions walk it twice, the
// search phase, then the cleanup phase).  A frame with landing pads has an
// LSDA, and the unwinder then calls the personality routine for it in
// each walk, which parses its call-site table; a frame without one costs
// only the FDE lookup and its CFI.  The exceptions raised here directly
// (thread_killed: empty, nothrow to make) need no cleanup, so every case
// whose exception is built from something that may throw
// (blocked_indefinitely's message) throws from a function of its own, and
// raise_outcome has no LSDA.  A kill does not even walk it: raise_outcome
// jumps to raise_killed, leaving no frame of its own (Note [Raising
// thread_killed in one walk]).  The IO manager's blocking
// calls (io_sleep, io_wait_fd), next on a killed sleeper's or fd waiter's
// stack, have none either: their failures throw from functions of their
// own, the guard that cancels an early exception lives in a frame that has
// returned by the throw (wait_box, rts/io/entry_points.cpp), and the
// uv_async_send they reach is called out of line (IoManager::send_wakeup);
// a kill does not walk them either (Note [A killed IO wait leaves no
// frame] there).
// Interleaved against the commit before, -N1, medians of 9: killblocked
// 100000 5 6.34 -> 5.96 us per thread (ratio to its floor 1.66-1.75 ->
// 1.51-1.60 in the first A/B, raise_outcome alone), shutdown 100000
// 3.94 -> 3.61 us and threads007 20000 3.93 -> 3.57 us per thread at
// exit (-8 to -9 %); pingpong and timeout unchanged.  Checked with
// `readelf --debug-dump=frames`: no augmentation data in these FDEs.
void mvar_core::raise_outcome(const waiter& w) {
  switch (w.outcome) {
    case waiter::served:
    case waiter::timed_out: return;
    case waiter::killed:       // by shutdown
    case waiter::kill_raised:  // by kill_thread: Note [Where a kill is caught] (schedule/fork.cpp)
      rts::raise_killed(w.outcome == waiter::kill_raised);  // a jump, see above
      return;
    case waiter::orphaned: throw_orphaned(w);
    case waiter::interrupted: rts::raise_interrupted(w.thread);  // set by publish_wait
  }
}

void mvar_core::park_wait(waiter& w) {
  rts::Task* task = rts::green_task_before_switch();  // used only before the switch
  if (!task) [[unlikely]] {
    remove(w);
    unlock();
    if (rts::my_task()) rts::require_green_thread("capstan::mvar take/put/read");  // inside safe_call
    throw usage_error(
        "capstan::mvar: take/put/read would block on an OS thread that is not running a green "
        "thread; block only inside capstan::run, or use try_take/try_put from other threads");
  }
  Thread* cur = task->cap->current;
  if (rts::rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] shutdown_checkpoint(*this, w, cur);
  if (cur->unarmed_timeouts != 0) [[unlikely]] arm_timeouts_or_leave(*this, w, cur);
  publish_wait(*this, w, task->cap, cur, 0);
  rts::park_current(task, cur, held_word_rts());  // releases our lock once we are off the CPU
}

void mvar_core::park_shielded(waiter& w) {
  rts::Task* task = rts::green_task_before_switch();
  if (!task) [[unlikely]] {
    park_wait(w);  // throws the usage error (and unlocks)
    return;
  }
  Thread* cur = task->cap->current;
  // Published like any wait (state_of and dumps see it), but post_throw
  // queues its message for the next safe point after the wait, and
  // request_kill and break_deadlock pass it by (waiter::shielded).
  w.shielded = true;
  publish_wait(*this, w, task->cap, cur, 0);
  rts::park_current(task, cur, held_word_rts());
}

// Note [Timed takes]
// ~~~~~~~~~~~~~~~~~~~
// take_for blocks like take, and also asks the IO manager for a timer
// (io_add_timeout) that may end the wait.  Exactly one of the put and the
// timer gets the waiter: both must dequeue it under the mvar's lock.  The
// timer fires on the IO thread, holding only (Thread*, token); the mvar may
// be gone by then, and the thread may be waiting on something else.  So
// it works like the shutdown killer (Note [Killing a blocked thread]),
// under the thread's wait_lock:
//  * the blocker, before parking, sets blocked_on/waiter and timed_seq =
//    a fresh token under wait_lock, and clears timed_seq under it once
//    the wait is over, however it ended;
//  * everyone who dequeues a timed waiter (serve(): put, the mvar's
//    destructor; the killer) clears blocked_on under wait_lock (w.timed
//    makes serve take it);
//  * the timer takes wait_lock and proceeds only if timed_seq is its token
//    and blocked_on is set: then the wait is still on and the mvar alive
//    (its destructor would have cleared blocked_on under the same lock).
//    It then *tries* the mvar lock (the order elsewhere is mvar lock ->
//    wait_lock), backing off and retrying on failure; holding both it
//    dequeues the waiter with outcome timed_out and wakes the thread.
// The timer is registered while the mvar lock is held and the thread is
// not yet parked; it cannot complete before the park's post-switch unlock,
// so a very short time-out still finds a saved context.  Thread objects
// are never freed while the runtime runs, and tokens are never reused, so
// a stale timer is harmless.  A wait that ends otherwise cancels its timer
// (so the IO thread's heap holds only live waits), but the cancel may come
// after the expiry began: then the expiry finds timed_seq cleared, or
// holding a later wait's token, and does nothing (Note [Cancelling a timer]
// in io/timers.cpp).
// Checked by models/mvar_block.pml (docs/models.md).
namespace {

void expire_timed_take(void* arg, std::uint64_t token) noexcept {
  auto* t = static_cast<Thread*>(arg);
  for (rts::SpinWait spin;; spin.turn()) {
    t->wait_lock.lock();
    // timed_seq first: blocked_on is guarded by wait_lock only during a
    // timed wait (an untimed one may write it without the lock).
    if (t->timed_seq != token || !t->blocked_on) {
      t->wait_lock.unlock();
      return;  // served, killed or orphaned first; or a later wait
    }
    mvar_core* m = t->blocked_on;
    if (!m->try_lock()) {
      t->wait_lock.unlock();
      continue;  // back off (spin, then yield) and retry
    }
    waiter* w = t->waiter;
    wake_list regranted;  // Note [Leaving the shared_mutex queue]
    leave_queue(*m, *w, regranted);
    w->outcome = waiter::timed_out;
    t->blocked_on = nullptr;
    t->waiter = nullptr;
    t->wait_lock.unlock();
    m->unlock();
    regranted.wake_all();
    rts::wake(t);
    return;
  }
}

}  // namespace

void mvar_core::park_timed_wait(waiter& w, long long ns) {
  rts::Task* task = rts::green_task_before_switch();
  if (!task) [[unlikely]] {
    park_wait(w);  // throws the usage error (and unlocks)
    return;
  }
  Thread* cur = task->cap->current;
  if (rts::rt.shutting_down.load(std::memory_order_relaxed)) [[unlikely]] shutdown_checkpoint(*this, w, cur);
  w.timed = true;
  if (cur->unarmed_timeouts != 0) [[unlikely]] arm_timeouts_or_leave(*this, w, cur);
  std::uint64_t token = ++cur->timed_next;
  publish_wait(*this, w, task->cap, cur, token);  // under wait_lock: the timer reads it (Note [Timed takes])
  rts::TimerRef timer;
  try {
    timer = rts::io_add_timeout(ns, &expire_timed_take, cur, token);
  } catch (...) {  // See Note [A timer that cannot be had]
    cur->wait_lock.lock();
    cur->blocked_on = nullptr;
    cur->waiter = nullptr;
    cur->timed_seq = 0;
    cur->wait_lock.unlock();
    leave_for_exception(*this, w);
    throw;
  }
  rts::park_current(task, cur, held_word_rts());
  // Possibly on another OS thread now; cur is still us.
  cur->wait_lock.lock();
  cur->timed_seq = 0;
  cur->wait_lock.unlock();
  // Only the timer sets timed_out; any other end cancels it, and a late
  // expiry finds timed_seq changed (Note [Cancelling a timer] in io/timers.cpp).
  if (w.outcome == waiter::timed_out) rts::io_forget_timeout(timer);
  else rts::io_cancel_timeout(timer);
}

// Note [Prefetching the woken thread's context]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread woken here usually runs next on this capability (a ring or a
// pipeline hands the token on, then blocks), and its first touch is the
// frame capstan_switch pops from its saved stack pointer - cold when many
// threads take turns: ring's 503 stacks and Thread objects do not fit in
// L1.  Serving asks for that frame's cache lines (two on x86-64, three on
// AArch64: rts/asm/context_frame.h) early, so the miss overlaps the
// waker's way to its own block.  Interleaved against the commit before,
// -N1, medians of 7 to 15 runs in four A/Bs: ring 2000000 -7 to -12 %
// (58.0 -> 51.0 ns per hop in one; -N2 57.7 -> 53.9), pingpong within
// +1.5 % (its two threads' frames are warm anyway), threads003 +1.3 to
// +3.9 % (30.3 -> 30.9 ns over 15 runs: its woken thread runs hundreds of
// threads later, so the lines come in early and are evicted again).
// Prefetching only while the run queue is empty (the woken thread then
// likely runs next) kept threads003's cost and halved ring's gain.  A
// woken thread's sp is set: it published its wait, and the lock serve
// holds is let go only once the thread is off the CPU (park_current).
// A prefetch never faults, whatever the address.
static inline void prefetch_context(const Thread* t) noexcept {
  const char* sp = static_cast<const char*>(t->sp);
  __builtin_prefetch(sp);
  __builtin_prefetch(sp + 64);
#if defined(__aarch64__)
  __builtin_prefetch(sp + 128);
#endif
}

Thread* mvar_core::serve(waiter& w) noexcept {
  Thread* t = w.thread;
  prefetch_context(t);
  remove(w);
  rts::Task* me = rts::my_task_before_switch();
  // (!me first: off the runtime's threads there may be no Runtime to read.)
  if (me && me->cap && !w.timed && rts::begin_unlocked_wait_write(me->cap)) [[likely]] {
    t->blocked_on = nullptr;
    t->waiter = nullptr;
    rts::end_unlocked_wait_write(me->cap);
  } else {
    // (An OS thread holding no capability - a plain thread, or one inside
    // safe_call - is not covered by enable_wait_locks' wait: it has no
    // capability to mark.)
    t->wait_lock.lock();  // Note [Killing a blocked thread]
    t->blocked_on = nullptr;
    t->waiter = nullptr;
    t->wait_lock.unlock();
  }
  w.outcome = waiter::served;  // last touch of w
  return t;
}

void mvar_core::blocking_point(const char* what) {
  rts::Task* task = rts::green_task_before_switch();  // no switch before its last use
  if (!task) [[unlikely]] {
    rts::require_green_thread(what);  // throws: inside safe_call, or a plain OS thread
    rts::throw_not_green(what);       // (not reached)
  }
  if (task->cap->context_switch.load(std::memory_order_relaxed) != 0) [[unlikely]]
    rts::yield_point_slow();
}
bool mvar_core::can_block() noexcept { return rts::green_task() != nullptr; }

void mvar_core::cannot_block(const char* what, const char* plain) {
  if (rts::my_task()) rts::require_green_thread(what);  // inside safe_call: throws its message
  throw usage_error(plain);
}

// A long chain (a latch, barrier or notify_all releasing thousands) marks
// the waker's capability from its kLongLoop-th thread until wake_chain is
// done, so that the hog warning does not blame the program for the
// runtime's own loop, the serving under the primitive's lock included
// (Note [Warning about a hog] in schedule/hog_warning.cpp).  Nothing
// between the first more() and the end of wake_chain switches: the
// capability read at the mark is still ours at the end.
void wake_list::more(Thread* t) noexcept {
  static_assert(kLongLoop == rts::kLongLoop);
  t->link = nullptr;  // t is dequeued and not yet runnable: link is free
  if (chain_tail_) {
    chain_tail_->link = t;
    if (++n_ == kLongLoop) [[unlikely]] marked_ = mark_long_loop();
  } else {
    chain_ = t;
    n_ = 2;  // first_ and t
    marked_ = nullptr;
  }
  chain_tail_ = t;  // served order is kept: FIFO into the run queue
}

void wake_list::wake_rest() noexcept {
  if (!chain_) [[likely]] {  // one thread: the hand-off's case
    rts::wake(first_);
    return;
  }
  wake_chain();
}

void wake_list::wake_chain() noexcept {
  rts::wake(first_);
  for (Thread* t = chain_; t;) {
    Thread* next = t->link;
    rts::wake(t);
    t = next;
  }
  if (marked_) [[unlikely]] marked_->runtime_loop.store(false, std::memory_order_relaxed);
}

rts::Capability* wake_list::mark_long_loop() noexcept {
  rts::Task* task = rts::my_task();
  // A plain OS thread has no capability to mark; an outer mark clears itself.
  if (!task || !task->cap || task->cap->runtime_loop.load(std::memory_order_relaxed)) return nullptr;
  task->cap->runtime_loop.store(true, std::memory_order_relaxed);
  return task->cap;
}

mvar_core::~mvar_core() {
  // Always take the lock, even with no waiters: a shutdown killer or a
  // blocker's post-switch unlock may still be inside.
  lock();
  wake_list woken;
  while (waiter* w = head_) {
    woken.add(serve(*w));
    w->outcome = waiter::orphaned;  // serve() left w's thread not yet runnable
  }
  unlock();
  woken.wake_all();
}

}  // namespace capstan::detail
