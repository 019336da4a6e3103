// run_queue.hpp - a capability's run queue: an intrusive deque of Threads.
//
// Owner: the Task holding the capability.  Other capabilities send threads
// through the Inbox and never push here.  One thing besides the owner may
// touch the queue: an idle capability taking threads from a capability
// that has stopped scheduling (steal_front), which it may do only by the
// asymmetric hand-shake of Note [Stealing from a stalled capability]
// (schedule/steal.cpp).  Every owner operation is wrapped in that
// hand-shake's light side: two plain stores and a plain load on x86, no
// locked instruction, no fence.
//
// Because a thief may remove threads between two owner operations, an
// owner must not carry what it read in one operation into the next: a
// size() can be larger than what the next pop_front finds.  Thieves only
// remove, never add, and never take a locked thread, so a locked front
// stays the front.  size() reads no more than a relaxed counter: a hint
// that may be larger than what the next pop_front finds.  push_front, push_back and pop_front are all O(1).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "primitives/spin.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

class RunQueue {
 public:
  bool empty() const {
    Owned g(*this);
    return head_ == nullptr;
  }
  std::size_t size() const { return size_.load(std::memory_order_relaxed); }
  Thread* front() const {
    Owned g(*this);
    return head_;
  }
  void push_back(Thread* t) {
    Owned g(*this);
    link_back(t);
    size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void push_front(Thread* t) {
    Owned g(*this);
    link_front(t);
    size_.store(size_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  Thread* pop_front() {
    std::size_t left;
    return pop_front(&left);
  }
  // take_bound removes and returns the first thread bound to a Task, or
  // null.  O(n): only for a capability no spare could take (Note [No OS
  // thread for a spare] in task/handover.cpp).
  Thread* take_bound() {
    Owned g(*this);
    Thread* prev = nullptr;
    for (Thread* t = head_; t; prev = t, t = t->link) {
      if (!t->bound_task) continue;
      if (prev) prev->link = t->link; else head_ = t->link;
      if (tail_ == t) tail_ = prev;
      t->link = nullptr;
      size_.store(size_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
      return t;
    }
    return nullptr;
  }
  // pop_front, also telling how many threads are left (one hand-shake
  // where pop_front, empty and size would be three: pick's hot path).
  Thread* pop_front(std::size_t* left) { return pop_front(left, nullptr); }
  // pop_front(left, behind): the same, and if it found a thread, `behind`
  // (when not null) joins the back in the same hand-shake: a yield's
  // rotation (Note [A yield rotates in one hand-shake] in
  // schedule/yield.cpp).  *left does not count `behind`.
  Thread* pop_front(std::size_t* left, Thread* behind) {
    Owned g(*this);
    Thread* t = head_;
    std::size_t n = size_.load(std::memory_order_relaxed);
    if (!t) {
      *left = 0;
      return nullptr;
    }
    head_ = t->link;
    if (!head_) tail_ = nullptr;
    else prefetch_next(head_);  // See Note [Prefetching the next thread]
    t->link = nullptr;
    if (behind) link_back(behind);
    size_.store(behind ? n : n - 1, std::memory_order_relaxed);
    *left = n - 1;
    return t;
  }

  // push_arrivals queues a chain of threads (linked through Thread::link)
  // in one hand-shake: a thread back from a safe call (`returning`) goes to
  // the front, the others to the back in chain order.  Returns how many.
  [[gnu::noinline]] std::size_t push_arrivals(Thread* chain) {
    Owned g(*this);
    std::size_t n = 0;
    for (Thread* t = chain; t; ++n) {
      Thread* next = t->link;  // the link_ calls overwrite it
      if (t->returning) [[unlikely]] {
        t->returning = false;
        link_front(t);
      } else {
        link_back(t);
      }
      t = next;
    }
    size_.store(size_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    return n;
  }

  // --- for thieves (schedule/steal.cpp) ------------------------------------
  // size_hint: the size as of the owner's last operation (relaxed: a hint).
  std::size_t size_hint() const { return size_.load(std::memory_order_relaxed); }
  // steal_front runs the heavy side of Note [Stealing from a stalled
  // capability]: it takes up to half of the threads (rounded up, front
  // first, skipping locked ones) and returns them as a chain linked
  // through Thread::link, or null if another thief is at work, the owner
  // did not leave its operation in time, or nothing could move.
  // `heavy_barrier` is the process-wide barrier (membarrier).
  Thread* steal_front(void (*heavy_barrier)(), std::size_t* n_out);

 private:
  // Owned: the owner's side of the hand-shake, around each operation.
  struct Owned {
    explicit Owned(const RunQueue& q) : q(q) {
      q.busy_.store(1, std::memory_order_relaxed);
      // Only a compiler barrier: the thief's membarrier makes it a full
      // fence whenever it matters (see the Note).
      std::atomic_signal_fence(std::memory_order_seq_cst);
      // acquire: after a steal, the thief's edits happen-before ours.
      if (q.thief_.load(std::memory_order_acquire) != 0) [[unlikely]] q.wait_for_thief();
    }
    ~Owned() {
      std::atomic_signal_fence(std::memory_order_seq_cst);
      // release: our edits happen-before a thief that reads 0 here.
      q.busy_.store(0, std::memory_order_release);
    }
    const RunQueue& q;
  };
  // Note [Prefetching the next thread]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // When a pop leaves a thread at the front, that thread is likely the
  // next to run, one scheduling decision from now; the first thing its
  // run touches is the frame capstan_switch pops from its saved stack
  // pointer, cold when many threads take turns (a pipeline's 500 stacks do
  // not fit in L1).  So the pop asks for that frame's lines now (as
  // serving a waiter does for the thread it wakes: Note [Prefetching the
  // woken thread's context] in mvar/mvar_core.cpp), and the miss overlaps
  // the current thread's run.  A thread that never ran has no frame yet
  // (sp null): nothing to fetch.  Interleaved against the commit before,
  // -N1, medians of 9 and 7: threads003 20000 33.65 -> 31.64 and 33.07 ->
  // 31.34 ns per hop (-5 to -6 %); medians of 7: ring, pingpong,
  // threads001, threads003 at -N2 within 2 %, and killblocked, threads007
  // and shutdown within 1 % (their victims' unwinding, not the switch
  // into them, is what costs).
  // Reading next->sp loads the next Thread's first line, which its run
  // reads anyway.  A prefetch never faults.  Tried and not kept: fetching
  // six lines of the frame instead of two (ring +9 %, threads003 +3 %),
  // and also fetching the Thread after next, so that its sp is warm when
  // its turn comes (threads003 +6 %; killblocked, threads007 and shutdown,
  // whose victims' Threads are cold, unchanged).
  static void prefetch_next(const Thread* next) {
    if (const char* sp = static_cast<const char*>(next->sp)) {
      __builtin_prefetch(sp);
      __builtin_prefetch(sp + 64);
#if defined(__aarch64__)
      __builtin_prefetch(sp + 128);  // three lines there: asm/context_frame.h
#endif
    }
  }
  // The list edits, inside an Owned section.
  void link_back(Thread* t) {
    t->link = nullptr;
    if (tail_) tail_->link = t; else head_ = t;
    tail_ = t;
  }
  void link_front(Thread* t) {
    t->link = head_;
    head_ = t;
    if (!tail_) tail_ = t;
  }
  // wait_for_thief: the owner's waiting branch.  It raises owner_waiting_
  // so that no new thief starts (a thief that read it clear just before
  // may still get in once: each thief delays the owner by one steal at
  // most, never indefinitely).
  [[gnu::noinline]] void wait_for_thief() const {
    owner_waiting_.store(1, std::memory_order_relaxed);
    for (;;) {
      busy_.store(0, std::memory_order_release);  // let the thief in
      for (SpinWait spin; thief_.load(std::memory_order_acquire) != 0;) spin.turn();
      busy_.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (thief_.load(std::memory_order_acquire) == 0) break;
    }
    owner_waiting_.store(0, std::memory_order_relaxed);
  }
  Thread* head_ = nullptr;  // [owner, or a thief inside the hand-shake]
  Thread* tail_ = nullptr;  // [owner, or a thief inside the hand-shake]
  // [owner, or a thief inside the hand-shake, writes; anyone reads, relaxed:
  // a thief's first look, and the owner's size(), are hints]
  std::atomic<std::size_t> size_{0};
  mutable std::atomic<std::uint32_t> busy_{0};  // [owner writes] 1 inside an operation
  std::atomic<std::uint32_t> thief_{0};       // [thieves CAS 0 -> 1] a steal in progress
  mutable std::atomic<std::uint32_t> owner_waiting_{0};  // [owner writes] waiting for a thief
};

inline Thread* RunQueue::steal_front(void (*heavy_barrier)(), std::size_t* n_out) {
  *n_out = 0;
  std::uint32_t expected = 0;
  if (size_.load(std::memory_order_relaxed) == 0 ||
      owner_waiting_.load(std::memory_order_relaxed) != 0 ||
      thief_.load(std::memory_order_relaxed) != 0 ||
      !thief_.compare_exchange_strong(expected, 1, std::memory_order_acquire))
    return nullptr;
  heavy_barrier();
  // The owner is now either outside every operation, and will see thief_
  // at its next one, or inside one and about to leave it.  Wait a little
  // for that (an OS thread descheduled mid-operation makes us give up).
  bool clear = false;
  for (unsigned i = 0; i < 4096; ++i) {
    if (busy_.load(std::memory_order_acquire) == 0) {
      clear = true;
      break;
    }
    cpu_relax();
  }
  Thread* first = nullptr;
  Thread* last = nullptr;
  std::size_t moved = 0;
  std::size_t size = size_.load(std::memory_order_relaxed);
  if (clear && size != 0) {
    std::size_t want = (size + 1) / 2;
    Thread* prev = nullptr;  // last thread kept
    for (Thread* t = head_; t && moved < want;) {
      Thread* next = t->link;
      // acquire: pairs with the landing side's release of `leaving`, so
      // the context it saved is visible to whoever runs the thread next.
      if (t->locked || t->leaving.load(std::memory_order_acquire)) {
        prev = t;
      } else {
        if (prev) prev->link = next; else head_ = next;
        if (tail_ == t) tail_ = prev;
        t->link = nullptr;
        if (last) last->link = t; else first = t;
        last = t;
        ++moved;
      }
      t = next;
    }
    size_.store(size - moved, std::memory_order_relaxed);
  }
  // release: our edits happen-before the owner's next operation.
  thief_.store(0, std::memory_order_release);
  *n_out = moved;
  return first;
}

}  // namespace capstan::rts
