// chan.hpp - GHC's Chan: an unbounded FIFO channel between green threads.
//
// Design: one lock and one FIFO of blocked readers (detail::mvar_core, the
// machinery behind mvar<T>, so a blocked read is interruptible by throw_to,
// mask-aware, a shutdown checkpoint and seen by deadlock detection), plus a
// ring buffer of the items nobody is waiting for.  Invariant, under the lock:
// readers wait only while the buffer is empty, so a write either hands its
// item straight to the oldest waiting reader or appends it.  See Note [Chan
// storage] for why a ring buffer rather than GHC's linked list of MVars.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"

namespace capstan {

namespace detail {
class async_group;

// Note [Chan storage]
// ~~~~~~~~~~~~~~~~~~~~
// GHC builds Chan from MVars: a linked list of MVar cells with a read-end
// and a write-end MVar, so every item costs two allocations and a write or
// read takes two MVar locks.  Here a chan is one lock (mvar_core's) over a
// ring buffer: a power-of-two array of slots used circularly, with a head
// index and a count.  Rejected alternatives:
//  * a linked list of mvars (GHC's shape): an allocation per item and two
//    lock round trips per operation, for a concurrency (readers and
//    writers on different ends proceeding in parallel) that a single
//    short critical section already gives almost all of;
//  * a segmented queue (a list of fixed-size blocks): no moves on growth,
//    but an allocation every block and the same single lock; the ring
//    moves each item at most a constant number of times amortised, and
//    its steady state (a reader keeping up with a writer) allocates
//    nothing at all;
//  * a lock-free queue: the blocked-reader queue needs the lock anyway
//    (a write must decide atomically between handing over and appending).
// The ring doubles when full and halves when a quarter full (down to
// kMinCapacity), so memory follows the chan's content, not its history.
// Moves happen under the chan's lock, so T's move constructor must not
// throw (a throw half-way through a resize could not be undone).
template <class T>
class chan_ring {
 public:
  static constexpr std::size_t kMinCapacity = 16;

  chan_ring() = default;
  chan_ring(const chan_ring&) = delete;
  chan_ring& operator=(const chan_ring&) = delete;
  ~chan_ring() {
    for (std::size_t i = 0; i < size_; ++i) std::destroy_at(buf_ + ((head_ + i) & (cap_ - 1)));
    release();
  }

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }

  void push(T v) {
    if (size_ == cap_) resize(cap_ == 0 ? kMinCapacity : cap_ * 2);  // may throw bad_alloc
    std::construct_at(buf_ + ((head_ + size_) & (cap_ - 1)), std::move(v));
    ++size_;
  }
  T pop() noexcept {
    T* p = buf_ + head_;
    T v = std::move(*p);
    std::destroy_at(p);
    head_ = (head_ + 1) & (cap_ - 1);
    --size_;
    if (cap_ > kMinCapacity && size_ <= cap_ / 4) shrink();
    return v;
  }

 private:
  void shrink() noexcept {
    try {
      resize(cap_ / 2);
    } catch (...) {
      // No memory for the smaller buffer: keep the larger one.
    }
  }
  void resize(std::size_t cap) {
    T* nb = alloc_.allocate(cap);
    for (std::size_t i = 0; i < size_; ++i) {
      T* p = buf_ + ((head_ + i) & (cap_ - 1));
      std::construct_at(nb + i, std::move(*p));
      std::destroy_at(p);
    }
    release();
    buf_ = nb;
    cap_ = cap;
    head_ = 0;
  }
  void release() noexcept {
    if (buf_) alloc_.deallocate(buf_, cap_);
    buf_ = nullptr;
  }

  [[no_unique_address]] std::allocator<T> alloc_;
  T* buf_ = nullptr;
  std::size_t cap_ = 0;   // 0 or a power of two
  std::size_t head_ = 0;  // index of the oldest item
  std::size_t size_ = 0;
};

}  // namespace detail

// chan<T> is an unbounded FIFO channel (GHC's Chan): write never blocks,
// read blocks while the chan is empty.  Any number of readers and writers;
// blocked readers are served in the order they blocked, each item going
// to exactly one reader.  Blocking calls need a green thread; write and
// try_read work from any thread while the runtime runs.  Readers still
// blocked when the chan is destroyed get blocked_indefinitely.
template <class T>
class chan {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "capstan::chan<T> needs a T whose move constructor does not throw");

 public:
  chan() = default;
  chan(const chan&) = delete;
  chan& operator=(const chan&) = delete;

  // write appends v, or hands it to the oldest blocked reader; never blocks.
  void write(T v) {
    op g(core_);
    put(g, std::move(v));
  }

  // read removes and returns the oldest item, waiting while the chan is empty.
  T read() {
    op g(core_);
    if (!ring_.empty()) return ring_.pop();
    std::optional<T> dest;
    detail::waiter w(detail::waiter::chan);
    block(g, w, dest);
    core_.park(w);  // returns with dest filled by a writer
    return std::move(*dest);
  }

  // try_read removes and returns the oldest item, or nullopt if empty.
  std::optional<T> try_read() {
    op g(core_);
    if (ring_.empty()) return std::nullopt;
    return ring_.pop();
  }

  // read_for is read that gives up after `d`: the item, or nullopt if none
  // came for this thread that long.  A write racing with the time-out
  // either hands this thread the item or keeps it in the chan - never both.
  template <class Rep, class Period>
  std::optional<T> read_for(const std::chrono::duration<Rep, Period>& d) {
    long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    op g(core_);
    if (!ring_.empty()) return ring_.pop();
    if (ns <= 0) return std::nullopt;
    std::optional<T> dest;
    detail::waiter w(detail::waiter::chan);
    block(g, w, dest);
    if (!core_.park_timed(w, ns)) return std::nullopt;
    return dest;
  }

  // size returns how many items the chan held at the moment of the call.
  std::size_t size() {
    op g(core_);
    return ring_.size();
  }

  // waiting returns how many readers were blocked at the moment of the call.
  std::size_t waiting() {
    op g(core_);
    return core_.waiters();
  }

 private:
  // See detail::core_op and Note [Killing around an mvar operation].
  using op = detail::core_op;

  // put is write's body (lock held).
  void put(op& g, T v) {
    if (detail::waiter* w = core_.front()) {
      static_cast<std::optional<T>*>(w->slot)->emplace(std::move(v));
      g.woken.add(core_.serve(*w));
      return;
    }
    ring_.push(std::move(v));
  }

  // write_no_checkpoint is write without its safe point, so it cannot
  // throw thread_killed (even at shutdown): for the reports of
  // detail::async_group's children, sent from a destructor.
  friend class detail::async_group;
  void write_no_checkpoint(T v) {
    op g(core_, op::no_checkpoint_t{});
    put(g, std::move(v));
  }

  // block enqueues w (lock held, chan empty) for dest and hands the lock
  // to the coming park; a caller that cannot park gets usage_error.
  void block(op& g, detail::waiter& w, std::optional<T>& dest) {
    if (!detail::mvar_core::can_block())
      throw usage_error(
          "capstan::chan: read/read_for would block on an OS thread that is not running a "
          "green thread; block only inside capstan::run, or use try_read from other threads");
    w.kind = detail::waiter::take;
    w.slot = &dest;
    core_.enqueue(w);
    g.release_to_park();
  }

  detail::mvar_core core_;    // destroyed last: it orphans blocked readers
  detail::chan_ring<T> ring_;  // guarded by core_'s lock
};

}  // namespace capstan
