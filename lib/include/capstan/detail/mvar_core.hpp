// detail/mvar_core.hpp - the type-independent half of mvar<T>: a lock and a
// FIFO of blocked green threads.  Not part of the API.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "capstan/detail/bridge.hpp"

namespace capstan::detail {

// One blocked operation; lives on the blocked thread's stack.
struct waiter {
  enum kind_t : std::uint8_t { take, read, put };
  // What ended the wait other than a value: set by the runtime, read by the
  // woken thread after park_wait() returns (park() throws it).
  // interrupted: an asynchronous exception (Thread::raised) ended the wait.
  // kill_raised: kill_thread ended the wait (a fresh thread_killed is
  // thrown, counted as an asynchronous exception); killed: shutdown did.
  enum outcome_t : std::uint8_t { served, killed, orphaned, timed_out, interrupted, kill_raised };
  // What the blocked thread waits in: the primitive that built this waiter,
  // for thread dumps, the event trace and gdb (never for control flow).
  enum what_t : std::uint8_t {
    mvar, chan, mutex, shared_mutex, condition_variable, semaphore, latch, barrier,
    wait_group, future, throw_to, runtime_event, spark
  };

  waiter() = default;
  explicit waiter(what_t w) noexcept : what(w) {}

  waiter* next = nullptr;
  waiter* prev = nullptr;
  rts::Thread* thread = nullptr;
  void* slot = nullptr;    // take/read: where to put the value; put: the value
  kind_t kind = take;
  what_t what = mvar;      // next to kind: the runtime copies both in one store
  outcome_t outcome = served;
  bool timed = false;      // take_for: a timer may end the wait (Note [Timed takes])
  bool shielded = false;   // park_shielded: only a serve ends the wait
  // A shared_mutex's waiter: whoever takes it off the queue without
  // serving it re-runs the grant (leave_queue; Note [Leaving the
  // shared_mutex queue] in capstan/shared_mutex.hpp).
  bool regrant = false;
};

// spin_turn is one turn of a busy wait for a lock holder that is running
// now: a pause, and after a while yielding the OS thread (the runtime's
// SpinWait policy, for lock words kept in public headers).
void spin_turn(unsigned& turns) noexcept;

// spin_before_blocking tells whether a green thread about to block for
// something another core may be producing at this moment (a chan item)
// should first watch for it a little: false unless the process has two
// CPUs and two capabilities, and the caller's capability has nothing else
// to run.  See Note [Chan readers spin] in chan.hpp.
bool spin_before_blocking() noexcept;

// memory_limit_bytes is the machine's memory plus swap, the most an
// allocation could ever get (chan::reserve's sanity check).
std::size_t memory_limit_bytes() noexcept;

// Note [Throwing from the caller's frame]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The wait itself does not throw: park_wait returns with the outcome in
// the waiter, and the inline park hands anything but a value to
// raise_outcome, which throws it.  What that buys is the served path: one
// compare inline where every wait used to call the function that read the
// outcome (callgrind, `pingpong 200000 +RTS -N1`: 185.7 M -> 177.7 M
// instructions, 20 fewer per hand-off).  It was meant to buy kills too -
// unwinding costs per frame walked, and a kill now walks raise_outcome and
// the blocking call's frame where it walked that function, park and the
// blocking call - but the frames it drops were the unwinder's cheapest
// (no cleanups, plain CFI): per kill, callgrind counts 174 instructions
// fewer of about 40,000 in `shutdown`, and 900 more in `killblocked`,
// whose personality-routine share grew.  Throwing inline, with
// raise_outcome's body in the header, was tried first and not kept: it
// put the exception's construction into every blocking call, and
// mvar<int>::take grew too big to be inlined into the IO manager's await,
// so a frame was gained (shutdown +14 %).  Exceptions due before the
// thread blocks (at shutdown, or a throw_to that came first) throw from
// inside park_wait.
//
// What does cost a kill is a frame the unwinder must stop in: a landing
// pad for a destructor, then _Unwind_Resume, which sets up its context
// afresh.  The IO manager's waits (sleeps, fd waits) therefore throw only
// after their frame's objects are gone: they wait through mvar<int>'s
// take_wait, which returns the outcome with the lock guard already
// released, and then send their cancel and raise (raise_cancelled in
// rts/io/entry_points.cpp).  Per kill at shutdown (callgrind, `shutdown
// 5000` against `shutdown 10000`, -N1, two thirds of the threads in IO
// waits): 33,870 -> 30,790 instructions.  Cheaper still is a frame with
// no LSDA at all, which the unwinder passes without calling the
// personality routine: raise_outcome's and the IO waits' frames have none
// (Note [A kill's frames have no cleanups] in rts/mvar/mvar_core.cpp), and
// cheapest a frame that is not there: a kill jumps from them to its raise
// (Note [A killed IO wait leaves no frame] in rts/io/entry_points.cpp).
// mvar<T>::take itself keeps the
// throw inside the guard's scope: moving it out made GCC stop inlining
// take into its callers (`pingpong 200000 +RTS -N1` 177.7 M -> 182.7 M
// instructions), and forcing the inlining still cost 2-6 instructions a
// hand-off; a user's frame around a take usually has cleanups of its own.

// Note [Waking after unlock]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread served by an mvar operation is made runnable only after the
// operation has released the mvar's lock and stopped touching the mvar:
// once woken, it may return and destroy the mvar at once (a `done` mvar on
// its stack, say).  Serving dequeues the waiter and settles its outcome
// under the lock; waking touches only the runtime's Thread.
// Checked by models/mvar_block.pml (docs/models.md).
class wake_list {
 public:
  void add(rts::Thread* thread) noexcept {
    if (!first_) first_ = thread; else more(thread);
  }
  // wake_all makes every collected thread runnable; call after unlocking.
  void wake_all() noexcept {
    if (first_) wake_rest();
  }
  bool empty() const noexcept { return first_ == nullptr; }

 private:
  // Collecting and waking this many threads or more marks the capability
  // (Capability::runtime_loop) from then until the wake is done.
  static constexpr unsigned kLongLoop = 1024;
  void more(rts::Thread* thread) noexcept;
  void wake_rest() noexcept;
  void wake_chain() noexcept;
  static rts::Capability* mark_long_loop() noexcept;
  rts::Thread* first_ = nullptr;
  rts::Thread* chain_ = nullptr;       // further threads, linked by the runtime
  rts::Thread* chain_tail_ = nullptr;
  // Set by more() only, and meaningful once chain_ is set: a hand-off to
  // one thread never pays for them (initialising them cost 4 instructions
  // a pingpong hand-off).  A wake_list is only ever copied while empty
  // (`woken = wake_list{}`), when they are never read.
  unsigned n_;                         // threads collected
  rts::Capability* marked_;            // the capability marked, once n_ reached kLongLoop
};

// Whether the calling OS thread holds the capability of a run whose mvar
// locks are biased (Note [Biased locks]) is tl_here.bias_owner
// (detail/bridge.hpp).  current_bias_owner returns it, out of line (Note
// [TLS across a switch] in rts/task/task.hpp).
bool current_bias_owner() noexcept;
// bias_owner_here is tl_here.bias_owner read inline where that is safe
// across a switch (as spark_pool_here in capstan/spark.hpp), else out of
// line.
inline bool bias_owner_here() noexcept {
#if defined(__x86_64__) && (!defined(__PIC__) || defined(__PIE__))
  return tl_here.bias_owner;
#else
  return current_bias_owner();
#endif
}
// bias_births: whether an mvar made by the lock's owner starts biased;
// false once a run has revoked kMaxRevocations of them (Note [Biased
// locks]).  Written by revokers (relaxed: a hint).
extern std::atomic<bool> bias_births;

// Note [Biased locks]
// ~~~~~~~~~~~~~~~~~~~
// With one capability, nearly every lock of an mvar is taken by the OS
// thread holding that capability, and a lock taken with an exchange costs
// a locked instruction: about 5 ns on some hosts, a sixth of a pingpong
// hand-off.  GHC skips the lock at -N1 because every MVar operation there
// runs holding the capability; here plain OS threads try_put, the IO
// thread ends timed takes, and a safe call's function may touch an mvar,
// all without it.  So in a run with one capability (and membarrier, and
// no ThreadSanitizer, which cannot see the fence) an mvar made by the
// capability's holder starts *biased* (state_ kBiased): the holder locks
// it with plain stores to owner_in_, and anyone else first revokes the
// bias for good, after which everyone takes locked_ with an exchange as
// before.  The hand-shake is the asymmetric fence of Note [Wait locks] in
// rts/schedule/raise.cpp:
//   owner (enter_biased): owner_in_ = 1 (relaxed, then a compiler
//          barrier); if state_ no longer reads kBiased, owner_in_ = 0
//          (release) and take locked_ instead; else the lock is held.
//          Unlock: owner_in_ = 0 (release).
//   revoker (revoke(), out of line):
//   1. state_ = kRevoking (seq_cst);
//   2. membarrier(PRIVATE_EXPEDITED): a full barrier on every running
//      thread of the process;
//   3. wait while owner_in_ is 1 (acquire);
//   4. state_ = kShared (release); then take locked_.
// An owner whose load of state_ follows its CPU's barrier of step 2 reads
// kRevoking or kShared and takes locked_, queueing behind the revoker like
// anyone.  One whose load precedes that barrier had its store of
// owner_in_ = 1 drained by it, so step 3 sees the 1 and waits for the
// release store that ends the owner's section, whose writes then
// happen-before the revoker's.  After step 2 no owner enters a biased
// section again.  Others that find kRevoking run the steps too (they are
// idempotent): an exchange on locked_ before step 3 had been seen through
// could overlap the owner's section.  A lock() that reads kShared
// (acquire) needs no more, since step 4 follows step 3.  try_lock's
// callers hold a thread's wait_lock, which a biased holder may be about
// to take, so its revoker (revoke(false)) gives up at step 3 instead of
// waiting, leaving kRevoking for the next caller to finish.  unlock()
// stores 0 to the one word its caller holds (held_word): owner_in_ if the
// caller is the owner and finds it 1 - only the owner stores 1 there, and
// its own reads see its own stores - else locked_.  Storing 0 to both
// would be wrong in either order: owner_in_ first lets a revoker waiting
// at step 3 take locked_ before the owner's second store frees it under
// the revoker; locked_ first touches the mvar after its release, when
// the thread the release let go may already have ended the mvar's life
// (a throw's landing in its thrower's frame).
// Park hands the switch's landing side the word it holds (held_word: the
// owner's thread tells by owner_in_, which only it sets).
// An mvar made by anyone but the owner - a plain OS thread, a capability
// of a run with several - is kShared from the start, as is a box the IO
// thread fills (share()).  Revoking costs a membarrier (about 0.2 us
// here) once per mvar; a run that has revoked kMaxRevocations mvars (a
// program handing a fresh mvar to an OS thread per job, say) makes new
// ones kShared from the start (bias_births).  Checked by
// models/biased_lock.pml (docs/models.md).
class mvar_core {
 public:
  // Biased when made by the lock's owner: see Note [Biased locks].
  mvar_core() noexcept
      : state_(bias_owner_here() && bias_births.load(std::memory_order_relaxed) ? kBiased
                                                                                : kShared) {}
  mvar_core(const mvar_core&) = delete;
  mvar_core& operator=(const mvar_core&) = delete;
  // Waiters still blocked when an mvar dies are woken with
  // capstan::blocked_indefinitely (GHC's BlockedIndefinitelyOnMVar).
  ~mvar_core();

  void lock() noexcept { (void)lock_held(); }
  // lock_held is lock, returning the word it holds: release(word) is then
  // unlock without finding out again which word that is.
  std::atomic<bool>* lock_held() noexcept {
    // Acquire (both): the value and the queue written under the lock are
    // visible to the next holder, and a revoker's kShared follows the
    // biased owner's last section (Note [Biased locks]).
    std::uint8_t st = state_.load(std::memory_order_acquire);
    if (st == kShared) [[likely]] {
      if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]] return &locked_;
    } else if (st == kBiased && enter_biased()) [[likely]] {
      return &owner_in_;
    }
    lock_slow();  // ends holding locked_
    return &locked_;
  }
  void unlock() noexcept {
    // Only the word held (Note [Biased locks]).
    held_word()->store(false, std::memory_order_release);
  }
  static void release(std::atomic<bool>* held) noexcept {
    held->store(false, std::memory_order_release);
  }
  // try_lock never waits, not even for a revocation (its callers hold a
  // thread's wait_lock, which a biased holder may be about to take).
  bool try_lock() noexcept {
    if (state_.load(std::memory_order_acquire) == kShared) [[likely]]
      return !locked_.exchange(true, std::memory_order_acquire);
    return try_lock_biased();
  }
  // share makes the lock shared from the start: for an mvar its maker
  // hands to another OS thread at once (an IO request's box).  Call before
  // publishing the mvar.
  void share() noexcept { state_.store(kShared, std::memory_order_relaxed); }
  // biased: the lock is still biased to the capability's holder (tests).
  bool biased() const noexcept { return state_.load(std::memory_order_acquire) == kBiased; }

  bool has_waiters() const noexcept { return head_ != nullptr; }
  std::size_t waiters() const noexcept { return n_waiters_; }
  waiter* front() const noexcept { return head_; }

  void enqueue(waiter& w) noexcept {
    w.next = nullptr;
    w.prev = tail_;
    if (tail_) tail_->next = &w; else head_ = &w;
    tail_ = &w;
    ++n_waiters_;
  }
  // enqueue_front queues w first (a waiter that lost a race it was woken
  // for keeps its place: capstan::mutex).
  void enqueue_front(waiter& w) noexcept {
    w.prev = nullptr;
    w.next = head_;
    if (head_) head_->prev = &w; else tail_ = &w;
    head_ = &w;
    ++n_waiters_;
  }
  void remove(waiter& w) noexcept {
    if (w.prev) w.prev->next = w.next; else head_ = w.next;
    if (w.next) w.next->prev = w.prev; else tail_ = w.prev;
    w.next = w.prev = nullptr;
    --n_waiters_;
  }

  // park blocks the calling green thread on w (already enqueued, lock held)
  // and releases the lock only after the thread's context is saved.  Returns
  // when another thread served w; throws thread_killed, blocked_indefinitely
  // or the exception thrown to the thread if the wait was ended otherwise
  // (raise_outcome).  See Note [Blocking on an MVar] and
  // Note [Throwing from the caller's frame].
  void park(waiter& w) {
    park_wait(w);
    if (w.outcome != waiter::served) [[unlikely]] raise_outcome(w);
  }
  // park_timed is park for a waiter that a timer ends after `ns`: true if
  // served, false if the time-out dequeued it.  See Note [Timed takes].
  bool park_timed(waiter& w, long long ns) {
    park_timed_wait(w, ns);
    if (w.outcome != waiter::served) [[unlikely]] raise_outcome(w);
    return w.outcome == waiter::served;
  }
  // park_wait and park_timed_wait are park and park_timed up to the end of
  // the wait: they leave its outcome in w and throw only before blocking
  // (usage_error, or an exception already due: Note [Raising
  // asynchronously]).
  void park_wait(waiter& w);
  void park_timed_wait(waiter& w, long long ns);
  // raise_outcome throws what ended w's wait, if anything but a value or
  // a time-out did (after park_wait).  Out of line and cold, so the
  // blocking calls that inline park stay small.
  [[gnu::cold, gnu::noinline]] static void raise_outcome(const waiter& w);
  // park_shielded is park for a wait that must not throw (a destructor's):
  // only a serve() ends it (w.shielded).  Throwers queue their exception
  // for the next safe point, the shutdown killer and deadlock detection
  // pass it by.  For waits whose waker is known to come (a running spark).
  void park_shielded(waiter& w);
  // serve dequeues waiter w (lock held) and settles it; its slot must
  // already hold the value (or have been read).  Returns its thread, to be
  // woken after unlock.  See Note [Waking after unlock].
  rts::Thread* serve(waiter& w) noexcept;
  // can_block tells whether the caller could park here: it runs a green
  // thread (not a plain OS thread, nor one inside safe_call).
  static bool can_block() noexcept;
  // cannot_block throws the usage_error for a caller that may not park
  // (can_block() false): inside safe_call the message that says so and
  // names `what`, else `plain` (on an OS thread running no green thread).
  [[noreturn]] static void cannot_block(const char* what, const char* plain);

  // blocking_point is the entry of a blocking call built on mvar_core (the
  // sync primitives): a safe point, and a usage_error naming `what` unless
  // the caller runs a green thread - checked whether or not the call would
  // block, so misuse shows on the first call.
  static void blocking_point(const char* what);

 private:
  // lock_slow: a lock not yet shared (revoked first) or a contended one.
  void lock_slow() noexcept;
  // state_: kBiased -> kRevoking -> kShared, each step once.
  static constexpr std::uint8_t kShared = 0, kBiased = 1, kRevoking = 2;
  // enter_biased is the owner's side of Note [Biased locks], for a caller
  // that read kBiased: true if it holds the capability and now the lock,
  // through owner_in_; false if it is not the owner or the bias is being
  // revoked.
  bool enter_biased() noexcept {
    if (!bias_owner_here()) return false;
    owner_in_.store(true, std::memory_order_relaxed);
    // Only a compiler barrier: a revoker's membarrier makes it a full one.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (state_.load(std::memory_order_relaxed) == kBiased) [[likely]] return true;
    owner_in_.store(false, std::memory_order_release);
    return false;
  }
  // try_lock_biased is try_lock on an mvar not yet shared; out of line.
  bool try_lock_biased() noexcept;
  // held_word is the word the caller, holding the lock, stores false to
  // let it go: unlock's, and what park hands to the switch's landing side.
  // Only an owner inside a biased section has owner_in_ set and reads it
  // 1: another OS thread may see an owner's passing store of 1 as it backs
  // off, hence the owner test.
  std::atomic<bool>* held_word() noexcept {
    return owner_in_.load(std::memory_order_relaxed) && bias_owner_here() ? &owner_in_ : &locked_;
  }
  // held_word_rts is held_word for the runtime's own code (park), which
  // reads the thread-local directly (rts/mvar/mvar_core.cpp).
  std::atomic<bool>* held_word_rts() noexcept;
  // revoke ends the bias for good (steps 1-4 of Note [Biased locks]) and
  // returns true; with wait false it gives up at step 3 instead, false,
  // leaving kRevoking for the next caller to finish.  Out of line.
  bool revoke(bool wait) noexcept;

  std::atomic<bool> locked_{false};    // the shared lock word
  std::atomic<bool> owner_in_{false};  // stored only by the capability's holder
  std::atomic<std::uint8_t> state_;    // kBiased, kRevoking or kShared
  waiter* head_ = nullptr;  // guarded by locked_
  waiter* tail_ = nullptr;  // guarded by locked_
  std::size_t n_waiters_ = 0;  // guarded by locked_
};

// core_op holds an mvar_core's lock for one operation of a primitive built
// on it (mvar<T>, chan<T>).  It passes a safe point (every runtime call is
// one) *before* locking, so a thread killed there (Note [Shutdown
// checkpoints]) has not yet touched the primitive; after the operation has
// taken effect nothing throws (Note [Killing around an mvar operation]).
// On every exit - normal, or an exception from T's constructors - it
// unlocks, then wakes the threads the operation served (Note [Waking after
// unlock]).  A blocking operation hands the lock to park() instead, which
// releases it once the thread is off the CPU.
//
// Note [Killing around an mvar operation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// thread_killed must never be raised once an operation has moved a value
// in or out: take() would lose the value it took, try_put would deliver
// its value and then report failure by throwing.  So the only places an
// mvar operation may throw it are before it takes effect: the safe point
// in core_op's constructor, and park() (which dequeues the waiter before
// throwing).  A thread served while parked returns normally; its next
// runtime call is the next checkpoint.  core_op's destructor never throws.
// The same holds for chan<T>'s operations.
struct core_op {
  mvar_core& core;
  wake_list woken;
  std::atomic<bool>* held = nullptr;  // the lock word held; null once park() has it
  explicit core_op(mvar_core& c) : core(c) {
    safe_point_here();
    held = core.lock_held();
  }
  // no_checkpoint: an operation that must not throw, even at shutdown
  // (a report from a destructor: Note [Async threads]).  Only for
  // operations that never block.
  struct no_checkpoint_t {};
  core_op(mvar_core& c, no_checkpoint_t) : core(c), held(c.lock_held()) {}
  core_op(const core_op&) = delete;
  core_op& operator=(const core_op&) = delete;
  void release_to_park() { held = nullptr; }
  // wake_now wakes the threads served so far, unlocking around it (an
  // operation that served others and will now park itself, which hands
  // the lock to park() and so wakes nobody after).  The state may change
  // while unlocked.
  void wake_now() {
    mvar_core::release(held);
    woken.wake_all();
    woken = wake_list{};
    held = core.lock_held();
  }
  ~core_op() {
    if (!held) return;  // parked: park() released the lock
    mvar_core::release(held);
    woken.wake_all();
  }
};

// shared_core is a shared_mutex's whole state: its queue of lockers and
// who holds it, all under the core's lock.  Here rather than in
// shared_mutex.hpp because leave_queue, which the runtime calls, needs it.
struct shared_core : mvar_core {
  bool writer = false;  // guarded by the lock
  long readers = 0;     // guarded by the lock
  // grant serves the front of the queue as far as the state allows (lock
  // held): a writer if the lock is free, else the readers at the front.
  // The served threads go to `woken`, to be woken after unlocking.
  void grant(wake_list& woken) noexcept {
    while (waiter* w = front()) {
      if (w->kind == waiter::take) {
        if (writer || readers != 0) break;
        writer = true;
        woken.add(serve(*w));
        break;
      }
      if (writer) break;
      ++readers;
      woken.add(serve(*w));
    }
  }
};

// leave_queue takes w off m's queue without serving it (a time-out, an
// exception, shutdown), m locked; a shared_mutex's waiter re-runs the
// grant there and then, adding whom it serves to `woken` (wake them after
// unlocking).  Note [Leaving the shared_mutex queue].
inline void leave_queue(mvar_core& m, waiter& w, wake_list& woken) noexcept {
  m.remove(w);
  if (w.regrant) [[unlikely]] static_cast<shared_core&>(m).grant(woken);
}

}  // namespace capstan::detail
