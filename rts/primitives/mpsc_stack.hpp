// mpsc_stack.hpp - an intrusive lock-free multi-producer stack whose single
// consumer takes it whole (a Treiber stack without pop).
//
// Any thread pushes a node (or a pre-linked chain of nodes); one consumer
// takes every node at once with an exchange and, usually, reverses the
// list into arrival order (take_all_fifo).  The consumer never pops a
// single node that a producer might be re-pushing, so there is no ABA
// problem and no node needs a counter or hazard pointer.  Nodes are linked
// through the member `Link` (a T*), written only by their pusher until the
// consumer takes them.
//
// Used by a capability's inbox (rts/capability/inbox.hpp: Threads sent to
// it) and by the IO manager's request queue (rts/io/io_manager.cpp:
// messages to the IO thread).
//
// Memory orderings:
//  * push: the successful CAS is at least `release`, so the pusher's writes
//    to the node (its link, its payload) happen before the consumer's
//    acquire exchange that takes it.  The caller may ask for `seq_cst`
//    (PushOrder) when the push is also one half of a store-load protocol,
//    as the inbox's is (Note [Sleeping capabilities]).  The failure order
//    is `relaxed`: a failed CAS only reloads the head, and we retry.
//  * take_all: the exchange is `acquire`, pairing with every push's
//    release (a release sequence: each later CAS on the head continues it).
//  * maybe_nonempty: a `relaxed` peek, only a hint.  nonempty_seq_cst is
//    the `seq_cst` load for the store-load protocols above.
#pragma once

#include <atomic>

namespace capstan::rts {

template <class T, T* T::*Link, std::memory_order PushOrder = std::memory_order_release>
class MpscStack {
  static_assert(PushOrder == std::memory_order_release || PushOrder == std::memory_order_acq_rel ||
                    PushOrder == std::memory_order_seq_cst,
                "MpscStack: a push must at least release the node");

 public:
  // push pushes n; returns true if the stack was empty (the caller may
  // need to wake the consumer only then).
  bool push(T* n) noexcept { return push_chain(n, n); }

  // push_chain pushes top..bottom, already linked through Link from top to
  // bottom (bottom's link is overwritten); take_all returns them in that
  // order, above what was there before.  Returns true if the stack was empty.
  bool push_chain(T* top, T* bottom) noexcept {
    T* h = head_.load(std::memory_order_relaxed);
    do {
      bottom->*Link = h;
    } while (!head_.compare_exchange_weak(h, top, PushOrder, std::memory_order_relaxed));
    return h == nullptr;
  }

  // take_all empties the stack: the nodes, last pushed first, or null.
  // Consumer only.
  T* take_all() noexcept { return head_.exchange(nullptr, std::memory_order_acquire); }

  // take_all_fifo is take_all reversed: first pushed first.
  T* take_all_fifo() noexcept { return reverse(take_all()); }

  bool maybe_nonempty() const noexcept { return head_.load(std::memory_order_relaxed) != nullptr; }
  bool nonempty_seq_cst() const noexcept {
    return head_.load(std::memory_order_seq_cst) != nullptr;
  }

  // reverse reverses a list linked through Link (the consumer's, or a
  // producer's own chain before it is pushed); each(k) is called after the
  // k-th node (1, 2, ...).
  template <class Each>
  static T* reverse(T* h, Each&& each) noexcept {
    T* r = nullptr;
    for (unsigned k = 1; h; ++k) {
      T* n = h->*Link;
      h->*Link = r;
      r = h;
      h = n;
      each(k);
    }
    return r;
  }
  static T* reverse(T* h) noexcept {
    return reverse(h, [](unsigned) {});
  }

 private:
  std::atomic<T*> head_{nullptr};
};

}  // namespace capstan::rts
