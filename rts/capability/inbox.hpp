// inbox.hpp - threads sent to a capability from elsewhere (lock-free MPSC).
//
// Any OS thread may push; only the capability's owner takes.  It is a
// Treiber stack of Threads linked through Thread::link, taken whole with one
// exchange and reversed into arrival (FIFO) order by the owner.  Taking the
// whole list at once means the consumer never pops a single node that might
// be concurrently re-pushed, so there is no ABA problem.
//
// Memory orderings:
//  * push: the CAS must be at least `release`, publishing the thread's
//    fields (its link, its cap) to the consumer; it is `seq_cst` because it
//    is also the sender's half of Note [Sleeping capabilities] (on x86 and
//    ARMv8 a seq_cst CAS costs what a release one does).  Failure is
//    `relaxed`: we retry anyway.
//  * take_all: the exchange is `acquire`, pairing with push's release.
//  * maybe_nonempty: a `relaxed` peek, only a hint; the sleep protocol uses
//    nonempty_seq_cst.  See Note [Sleeping capabilities].
#pragma once

#include <atomic>

#include "thread/thread.hpp"

namespace capstan::rts {

class Inbox {
 public:
  // push_chain pushes first..last (linked through link, in FIFO order).
  void push_chain(Thread* first, Thread* last) {
    // Reverse into LIFO order so that take_all's reversal restores FIFO.
    Thread* rev = nullptr;
    Thread* end = last->link;
    for (Thread* t = first; t != end;) {
      Thread* n = t->link;
      t->link = rev;
      rev = t;
      t = n;
    }
    // now rev == last ... first; `first` is the tail of the reversed chain
    Thread* h = head_.load(std::memory_order_relaxed);
    do {
      first->link = h;
    } while (!head_.compare_exchange_weak(h, rev, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  }
  void push(Thread* t) {
    Thread* h = head_.load(std::memory_order_relaxed);
    do {
      t->link = h;
    } while (!head_.compare_exchange_weak(h, t, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  }
  bool maybe_nonempty() const { return head_.load(std::memory_order_relaxed) != nullptr; }
  bool nonempty_seq_cst() const { return head_.load(std::memory_order_seq_cst) != nullptr; }

  // take_all returns every pushed thread in arrival order, or null.
  Thread* take_all() {
    Thread* h = head_.exchange(nullptr, std::memory_order_acquire);
    Thread* fifo = nullptr;
    while (h) {
      Thread* n = h->link;
      h->link = fifo;
      fifo = h;
      h = n;
    }
    return fifo;
  }

 private:
  std::atomic<Thread*> head_{nullptr};
};

}  // namespace capstan::rts
