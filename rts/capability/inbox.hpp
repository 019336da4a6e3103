// inbox.hpp - threads sent to a capability from elsewhere (lock-free MPSC).
//
// Any OS thread may push; only the capability's owner takes.  It is an
// MpscStack of Threads linked through Thread::link (rts/primitives/
// mpsc_stack.hpp), taken whole with one exchange and reversed into arrival
// (FIFO) order by the owner.
//
// Memory orderings (the primitive states the general ones):
//  * push: the CAS is `seq_cst`, not only `release`, because it is also the
//    sender's half of Note [Sleeping capabilities] (on x86 and ARMv8 a
//    seq_cst CAS costs what a release one does).
//  * take_all: the `acquire` exchange, pairing with push.
//  * maybe_nonempty: a `relaxed` peek, only a hint; the sleep protocol uses
//    nonempty_seq_cst.  See Note [Sleeping capabilities].
#pragma once

#include <atomic>

#include "primitives/mpsc_stack.hpp"
#include "primitives/runtime_work.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

class Inbox {
 public:
  // push_chain pushes first..last (linked through link, in FIFO order).
  void push_chain(Thread* first, Thread* last) {
    // Reverse into LIFO order so that take_all's reversal restores FIFO.
    last->link = nullptr;  // the chain may go on in the caller's list: cut it
    Thread* rev = Stack::reverse(first);  // last ... first
    stack_.push_chain(rev, first);        // first, now the bottom, links to the old head
  }
  void push(Thread* t) { stack_.push(t); }
  bool maybe_nonempty() const { return stack_.maybe_nonempty(); }
  bool nonempty_seq_cst() const { return stack_.nonempty_seq_cst(); }

  // take_all returns every pushed thread in arrival order, or null.  From
  // the kLongLoop-th thread on it sets `long_loop` (its capability's
  // runtime_loop), which the caller clears once the arrivals are queued:
  // Note [Warning about a hog] in schedule/hog_warning.cpp.
  Thread* take_all(std::atomic<bool>& long_loop) {
    return Stack::reverse(stack_.take_all(), [&](unsigned k) {
      if (k == kLongLoop) [[unlikely]] long_loop.store(true, std::memory_order_relaxed);
    });
  }

 private:
  using Stack = MpscStack<Thread, &Thread::link, std::memory_order_seq_cst>;
  Stack stack_;
};

}  // namespace capstan::rts
