// chan.hpp - GHC's Chan: an unbounded FIFO channel between green threads.
//
// Design: a writers' side and a readers' side that share no lock.  Items
// live in a list of fixed-size blocks; writers append under a lock bit
// kept in the chan's one atomic state word, which also counts the items
// ever published, so a write takes its lock and publishes in two atomic
// steps on a word only writers write.  Readers take items under the lock
// of a detail::mvar_core, which also queues blocked readers (so a blocked
// read is interruptible by throw_to, mask-aware, a shutdown checkpoint
// and seen by deadlock detection, like an mvar take).  A reader that finds
// the chan empty sets a "readers waiting" bit in the state word; a write
// that sees it serves the queue.  See Note [Chan storage], Note [Chan
// readers waiting] and Note [Chan lifetime].
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <new>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"
#include "capstan/detail/duration.hpp"

namespace capstan {

namespace detail {
class async_group;

// Note [Chan storage]
// ~~~~~~~~~~~~~~~~~~~~
// GHC builds Chan from MVars: a linked list of MVar cells with a read-end
// and a write-end MVar, so every item costs two allocations and a write or
// read takes two MVar locks.  Here a chan is a list of blocks of kItems
// slots: writers fill the last block, readers empty the first.  The two
// ends share no lock: writers serialise on the lock bit of the state word
// (Note [Chan readers waiting]), readers on the mvar_core's lock.  When a
// writer and a reader run on two cores, what crosses between them is the
// slots (a cache line of them at a time) and, only when the reader has
// caught up, the state word: the reader caches the count of published
// items it last saw (seen_) and reads the word again only when it has
// taken them all.  A block the readers have emptied becomes the one spare
// (a writer takes it instead of allocating); a second is freed, so memory
// follows the chan's content, not its history, and a reader keeping up
// with a writer allocates nothing.  reserve() sets blocks aside for the
// writers (reserve_, guarded by the writers' lock bit; new_block takes one
// only when there is no spare), so that writes it made room for never
// allocate; those blocks stay allocated until used.  It takes and drops
// the lock bit without publishing, as a write whose allocation failed does.
// Rejected alternatives:
//  * one lock over a ring buffer (this chan's first shape): at -N1 the
//    cheapest, but with the writer and the reader on two cores every item
//    moved the lock word and the ring's indices between them, 37-65 ns
//    per item against 17-18 ns on one core;
//  * a linked list of mvars (GHC's shape): an allocation per item and two
//    lock round trips per operation;
//  * writers reserving slots with a fetch-and-add and no lock (a Kotlin
//    channel): each writer then walks to its slot's block while readers
//    free blocks behind it, which needs hazard pointers or epochs; the
//    writers' lock is taken once per item on a line only writers write.
template <class T>
struct chan_block {
  static constexpr std::size_t kItems = sizeof(T) >= 512 ? 8 : 4096 / sizeof(T);
  chan_block* next = nullptr;  // written by the writer that links the next block
  alignas(T) unsigned char bytes[kItems * sizeof(T)];
  T* at(std::size_t i) noexcept { return std::launder(reinterpret_cast<T*>(bytes)) + i; }
};

}  // namespace detail

// chan<T> is an unbounded FIFO channel (GHC's Chan): write never blocks,
// read blocks while the chan is empty.  Any number of readers and writers;
// blocked readers are served in the order they blocked, each item going
// to exactly one reader.  Blocking calls need a green thread; write,
// try_read and the rest work from any thread while the runtime runs.
// Readers still blocked when the chan is destroyed get blocked_indefinitely.
template <class T>
class chan {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "capstan::chan<T> needs a T whose move constructor does not throw");
  using block = detail::chan_block<T>;

 public:
  chan() = default;
  chan(const chan&) = delete;
  chan& operator=(const chan&) = delete;
  ~chan();

  // write appends v, or hands it to the oldest blocked reader; never blocks.
  void write(T v) {
    detail::safe_point_here();
    put(std::move(v));
  }

  // read removes and returns the oldest item, waiting while the chan is empty.
  T read() {
    op g(core_);
    if (take_now(g, true)) [[likely]] return pop();
    std::optional<T> dest;
    detail::waiter w(detail::waiter::chan);
    if (!block_or_serve(g, w, dest)) core_.park(w);  // returns with dest filled by a writer
    return std::move(*dest);
  }

  // try_read removes and returns the oldest item, or nullopt if empty.
  std::optional<T> try_read() {
    op g(core_);
    if (!take_now(g, false)) return std::nullopt;
    return pop();
  }

  // read_for is read that gives up after `d`: the item, or nullopt if none
  // came for this thread that long.  A write racing with the time-out
  // either hands this thread the item or keeps it in the chan - never both.
  template <class Rep, class Period>
  std::optional<T> read_for(const std::chrono::duration<Rep, Period>& d) {
    long long ns = detail::to_ns(d);
    op g(core_);
    if (take_now(g, ns > 0)) return pop();
    if (ns <= 0) return std::nullopt;
    std::optional<T> dest;
    detail::waiter w(detail::waiter::chan);
    if (block_or_serve(g, w, dest)) return dest;
    if (!core_.park_timed(w, ns)) return std::nullopt;
    return dest;
  }

  // size returns how many items the chan held at the moment of the call.
  std::size_t size() {
    op g(core_);
    return static_cast<std::size_t>(distance(published(state_.load(std::memory_order_acquire)), rpos_));
  }

  // capacity returns how many items the chan's storage, allocated at the
  // moment of the call, holds (blocks in use, the one spare, and those
  // reserve() set aside).
  std::size_t capacity() const noexcept {
    return blocks_.load(std::memory_order_relaxed) * block::kItems;
  }

  // reserve makes room for n more items than the chan holds now, so that
  // the next n writes allocate nothing (they cannot fail for memory); not
  // cumulative (reserve(5) twice leaves room for 5).  May throw bad_alloc
  // itself, keeping what it set aside.  Never blocks; any thread.  An n
  // beyond max_size() is std::length_error, and one whose blocks would
  // not fit in the machine's memory and swap is std::bad_alloc, both
  // before anything is allocated.
  void reserve(std::size_t n) {
    if (n > max_size())
      throw std::length_error("capstan::chan::reserve: n exceeds chan::max_size()");
    if (n / block::kItems + 1 > detail::memory_limit_bytes() / sizeof(block)) throw std::bad_alloc();
    lock_writers();
    std::size_t room = wblock_ ? block::kItems - woff_ : 0;
    for (block* b = reserve_; b; b = b->next) room += block::kItems;
    try {
      while (room < n) {
        auto* b = new block;
        blocks_.fetch_add(1, std::memory_order_relaxed);
        b->next = std::exchange(reserve_, b);
        room += block::kItems;
      }
    } catch (...) {
      unlock_writers();
      throw;
    }
    unlock_writers();
  }

  // max_size is the most items reserve() accepts (as std::vector's).
  static constexpr std::size_t max_size() noexcept {
    return static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(block) * block::kItems;
  }

  // waiting returns how many readers were blocked at the moment of the call.
  std::size_t waiting() {
    op g(core_);
    return core_.waiters();
  }

 private:
  // See detail::core_op and Note [Killing around an mvar operation].
  using op = detail::core_op;

  // The state word (Note [Chan readers waiting]): bit 0 the writers' lock,
  // bit 1 "readers may be waiting", bits 2-23 the writers still serving
  // (Note [Chan lifetime]), bits 24-63 the count of items ever published,
  // modulo 2^40 (a reader's position is kept modulo the same; the distance
  // between the two, the items unread, is far below 2^40, which would take
  // a terabyte of items).
  static constexpr std::uint64_t kLock = 1, kWait = 2, kServer = 4;
  static constexpr unsigned kCountShift = 24;
  static constexpr std::uint64_t kServers = (std::uint64_t{1} << kCountShift) - kServer;
  // One count per OS thread that can exist: Linux's pid_max is at most
  // 2^22, so the server count cannot carry into the item count.
  static_assert(kServers / kServer >= (std::uint64_t{1} << 22) - 1);
  static constexpr std::uint64_t kOne = std::uint64_t{1} << kCountShift;
  static std::uint64_t published(std::uint64_t s) noexcept { return s >> kCountShift; }
  static constexpr std::uint64_t kCountMask = ~std::uint64_t{0} >> kCountShift;
  static std::uint64_t next_pos(std::uint64_t p) noexcept { return (p + 1) & kCountMask; }
  // distance: how far count `to` is ahead of count `from`, modulo 2^40.
  static std::uint64_t distance(std::uint64_t to, std::uint64_t from) noexcept { return (to - from) & kCountMask; }

  // put is write's body: append under the writers' lock, then publish the
  // item and unlock in one step; serve blocked readers if any may wait.
  void put(T v) {
    std::uint64_t s = lock_writers();
    if (!wblock_ || woff_ == block::kItems) [[unlikely]] {
      block* b;
      try {
        b = new_block();
      } catch (...) {
        unlock_writers();
        throw;
      }
      if (wblock_) wblock_->next = b; else first_ = b;
      wblock_ = b;
      woff_ = 0;
    }
    std::construct_at(wblock_->at(woff_++), std::move(v));
    // Release: the slot (and a new block's link) are visible to a reader
    // that acquires a count including this item.  A writer that sees kWait
    // counts itself a server in the same step (Note [Chan lifetime]).
    while (!state_.compare_exchange_weak(s, (s & ~kLock) + kOne + (s & kWait ? kServer : 0),
                                         std::memory_order_release, std::memory_order_relaxed)) {
    }
    if (s & kWait) [[unlikely]] serve_from_writer();
  }

  // unlock_writers drops the writers' lock bit without publishing an item
  // (a write whose allocation failed, reserve).  Release: as a write's.
  void unlock_writers() noexcept { state_.fetch_and(~kLock, std::memory_order_release); }

  // lock_writers takes the writers' lock bit and returns the state with it
  // set.  Acquire: the previous writer's appends (wblock_, woff_) and
  // reserve()'s blocks (reserve_).
  std::uint64_t lock_writers() noexcept {
    std::uint64_t s = state_.load(std::memory_order_relaxed);
    for (unsigned turns = 0;;) {
      if (!(s & kLock)) {
        if (state_.compare_exchange_weak(s, s | kLock, std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return s | kLock;
      } else {
        detail::spin_turn(turns);
        s = state_.load(std::memory_order_relaxed);
      }
    }
  }

  // serve_from_writer: a writer that saw kWait hands items to blocked
  // readers, then stops counting as a server - its last touch of the chan.
  void serve_from_writer() noexcept {
    detail::wake_list woken;
    core_.lock();
    serve_locked(woken);
    core_.unlock();
    state_.fetch_sub(kServer, std::memory_order_release);  // Note [Chan lifetime]
    woken.wake_all();
  }

  // serve_locked hands available items to blocked readers, oldest first,
  // collecting their threads to wake after unlock; clears kWait once no
  // reader waits.  core_ locked.
  void serve_locked(detail::wake_list& woken) noexcept {
    while (detail::waiter* w = core_.front()) {
      if (!available()) return;
      static_cast<std::optional<T>*>(w->slot)->emplace(pop());
      woken.add(core_.serve(*w));
    }
    clear_wait();
  }

  // clear_wait clears kWait, the queue being empty.  Relaxed: kWait only
  // sends writers to the slow path, and it is set and cleared under core_'s
  // lock (Note [Chan readers waiting]).  core_ locked.
  void clear_wait() noexcept {
    if (state_.load(std::memory_order_relaxed) & kWait) state_.fetch_and(~kWait, std::memory_order_relaxed);
  }

  // available tells whether an item is published beyond the readers'
  // position, reading the state word only once the cached count is used
  // up.  Acquire: the slots of the items counted.  core_ locked.
  bool available() noexcept {
    return rpos_ != seen_ || rpos_ != (seen_ = published(state_.load(std::memory_order_acquire)));
  }

  // take_now tells whether the caller may take the oldest item now.
  // Blocked readers come first: if any is queued (items published for
  // them may not have reached them yet: their server is on its way), the
  // caller serves them, and takes what is left.  So a reader never blocks,
  // nor a try_read fails, while the chan holds an item.  may_spin: see
  // spin_for_item.  core_ locked.
  bool take_now(op& g, bool may_spin) noexcept {
    if (core_.has_waiters()) [[unlikely]] {
      serve_locked(g.woken);
      if (core_.has_waiters()) return false;
    }
    return available() || (may_spin && spin_for_item());
  }

  // spin_for_item watches the state word a little for a writer on another
  // core before the caller blocks, unlocking core_ meanwhile: true if an
  // item came and no reader queued meanwhile.  See Note [Chan readers spin].
  bool spin_for_item() noexcept {
    if (!detail::spin_before_blocking()) return false;
    std::uint64_t seen = seen_;
    core_.unlock();
    for (unsigned turns = 0; turns < kSpinTurns;) {
      for (unsigned i = 0; i < kSpinPace; ++i) detail::spin_turn(turns);
      // Relaxed: only a hint; available() below acquires.
      if (published(state_.load(std::memory_order_relaxed)) != seen) break;
    }
    core_.lock();
    return !core_.has_waiters() && available();
  }
  static constexpr unsigned kSpinTurns = 64;  // below spin_turn's yielding
  static constexpr unsigned kSpinPace = 8;

  // pop removes the oldest item (available() was true).  core_ locked.
  T pop() noexcept {
    if (!rblock_) [[unlikely]] {
      rblock_ = first_;  // written before the first item was published
      roff_ = 0;
    } else if (roff_ == block::kItems) [[unlikely]] {
      block* done = rblock_;
      rblock_ = done->next;  // linked before an item in it was published
      roff_ = 0;
      recycle(done);
    }
    T* p = rblock_->at(roff_++);
    T v = std::move(*p);
    std::destroy_at(p);
    rpos_ = next_pos(rpos_);
    return v;
  }

  // new_block: the spare if there is one, else a reserved block, else a
  // fresh block (may throw).  Writers' lock held.  Acquire/release on
  // spare_: the reader's last touches of a recycled block come before the
  // writer's first.
  block* new_block() {
    if (block* b = spare_.exchange(nullptr, std::memory_order_acq_rel)) {
      b->next = nullptr;
      return b;
    }
    if (block* b = reserve_) {
      reserve_ = std::exchange(b->next, nullptr);
      return b;
    }
    block* b = new block;
    blocks_.fetch_add(1, std::memory_order_relaxed);
    return b;
  }
  void recycle(block* b) noexcept {
    if (block* old = spare_.exchange(b, std::memory_order_acq_rel)) {
      delete old;
      blocks_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  // block_or_serve enqueues w for dest and sets kWait; if an item was
  // published meanwhile and no reader is ahead, takes it into dest and
  // returns true; else the lock goes to the coming park.  A caller that
  // cannot park gets usage_error.  core_ locked.
  bool block_or_serve(op& g, detail::waiter& w, std::optional<T>& dest) {
    if (!g.woken.empty()) g.wake_now();  // served by take_now: park would not wake them
    if (!detail::mvar_core::can_block())
      detail::mvar_core::cannot_block(
          "capstan::chan::read",
          "capstan::chan: read/read_for would block on an OS thread that is not running a "
          "green thread; block only inside capstan::run, or use try_read from other threads");
    w.kind = detail::waiter::take;
    w.slot = &dest;
    core_.enqueue(w);
    // Acq_rel: a read-modify-write of the state word, so either a writer's
    // publish comes before it and we see the count here, or it comes after
    // and that writer sees kWait (Note [Chan readers waiting]).
    seen_ = published(state_.fetch_or(kWait, std::memory_order_acq_rel));
    if (core_.front() == &w && available()) {
      // Published before our fetch_or: ours, as no reader is ahead of us.
      // Older readers' items are the servers' to hand over (Note [Chan
      // readers waiting]).
      dest.emplace(pop());
      core_.remove(w);  // the front and the newest: the queue is empty now
      clear_wait();
      return true;
    }
    g.release_to_park();
    return false;
  }

  // write_no_checkpoint is write without its safe point, so it cannot
  // throw thread_killed (even at shutdown): for the reports of
  // detail::async_group's children, sent from a destructor.
  friend class detail::async_group;
  void write_no_checkpoint(T v) { put(std::move(v)); }

  detail::mvar_core core_;  // readers' lock and blocked readers; destroyed last: it orphans them

  // Readers' side, guarded by core_'s lock.
  block* rblock_ = nullptr;  // the block holding the oldest item (null before the first)
  std::size_t roff_ = 0;     // the oldest item's slot in rblock_
  std::uint64_t rpos_ = 0;   // items ever taken, modulo 2^40
  std::uint64_t seen_ = 0;   // the published count as last read

  std::atomic<block*> spare_{nullptr};  // an emptied block for the next writer that needs one
  std::atomic<std::size_t> blocks_{0};  // blocks allocated, for capacity(); relaxed: a report

  // Writers' side: the state word, and what its lock bit guards.
  alignas(64) std::atomic<std::uint64_t> state_{0};
  block* wblock_ = nullptr;  // the block being filled
  std::size_t woff_ = 0;     // its next free slot
  block* first_ = nullptr;   // the first block, set with the first item
  block* reserve_ = nullptr; // blocks reserve() set aside, linked by next
};

// Note [Chan readers waiting]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A write must never leave a reader blocked while the chan holds an item.
// Both sides meet in one atomic word, state_, whose every change is a
// read-modify-write and so falls in one total order:
//  * a writer publishes its item by adding to the count (the same step
//    drops the writers' lock) and learns in that step whether kWait was
//    set;
//  * a reader that finds nothing, holding core_'s lock, enqueues itself
//    and sets kWait with fetch_or, learning in that step the count.
// If the fetch_or comes first, the writer sees kWait and serves the
// queue, taking core_'s lock, which the reader holds until it is off the
// CPU (park), so the reader is parked and enqueued by then.  If the
// publish comes first, the reader sees the item in the count; at the
// front of the queue it takes the item and does not park.  Behind other
// readers it parks: the item is theirs, and a server is on its way to
// them.  By induction on the queue: outside core_'s critical sections
// kWait is set whenever a reader is queued (the enqueuer sets it before
// unlocking; it is cleared only under the lock with the queue empty), so
// an item published while a reader is queued has a writer that serves
// after it; and one published before the front reader queued was seen by
// that reader, which took it.  A reader that will park serves nobody
// after it has queued: it would have to wake them before its park
// released the lock (Note [Waking after unlock]).  Before it queues, a
// reader - and try_read - that finds readers queued serves them first
// (take_now), waking them before it parks (core_op::wake_now), so a
// reader never blocks, and try_read never fails, while the chan holds an
// item (and a plain OS thread's read then takes it rather than throwing
// usage_error).  Between a publish and its server's serve, though, items
// and blocked readers can be seen at once (size() and waiting() both
// above zero).  A reader the killer or a timer dequeued can leave kWait
// set, which sends writers to serve an empty queue until one of them
// clears it.  Blocked readers are served oldest first: a reader that finds
// readers already queued queues behind them.
//
// Note [Chan readers spin]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A reader that has caught up with a writer running on another core would
// block, and the writer's next item would then pay for serving it: core_'s
// lock, a wake-up sent to the reader's capability, often an OS wake-up of
// that capability: about 200,000 blocks for 10 M items in `chan`'s split
// placement (`+RTS -s`: capability 1's context switches), and 200-700
// with the spin below.  So a reader that finds the chan empty first
// watches the state word for kSpinTurns pause turns (a few hundred ns to a
// few µs, by the CPU's pause) with core_ unlocked, but only where that can
// pay: two CPUs and two capabilities, and nothing else runnable on its
// capability (detail::spin_before_blocking).  It reads the word once per
// kSpinPace turns, not on every turn: each read pulls the line the writer
// publishes on away from the writer's core, and a reader polling flat out
// made the writer miss on every item (split placement 22-95 M items/s,
// against 67-85 M paced).  An item that comes is taken as on the fast
// path; none, and the reader blocks as before.  A spinning reader is not
// queued: a reader arriving meanwhile may take the item first, and the
// spinner then blocks behind it - only blocked readers are ordered.
//
// Note [Chan lifetime]
// ~~~~~~~~~~~~~~~~~~~~~
// A reader may destroy the chan as soon as it has the item it wanted (a
// pipeline's last read; an async group reading its last report).  So no
// write may touch the chan after its item can be read:
//  * a write that sees no kWait is done when it publishes;
//  * a write that sees kWait goes on to take core_'s lock and serve, after
//    its item may already have gone to a reader.  It announces itself in
//    the publishing step (the server count), and drops the count as its
//    last touch, before waking anyone.  The destructor waits until no
//    server is counted.  A green writer is never descheduled by the
//    runtime between the two steps, so the wait is short; a plain OS
//    thread's write can be preempted there by the OS, and the destructor
//    then spins and yields until it is done.  The count is bounded by the
//    OS threads writing at once, and its 22 bits hold one per thread that
//    Linux can have (pid_max <= 2^22): it cannot overflow into the item
//    count.
// A write still appending when the chan is destroyed is the caller's
// error, as for any object.  A write may allocate a block (every kItems
// items unless a spare or a reserved block is there), so even
// write_no_checkpoint can throw bad_alloc - unless reserve() made room
// first: detail::async_group reserves one item per child, so its reports,
// sent from a noexcept destructor, never allocate.
template <class T>
chan<T>::~chan() {
  // Acquire: the servers' last touches come before the blocks are freed.
  for (unsigned turns = 0; state_.load(std::memory_order_acquire) & kServers;)
    detail::spin_turn(turns);
  core_.lock();  // a blocked reader's post-switch unlock may still be inside
  std::uint64_t n = distance(published(state_.load(std::memory_order_acquire)), rpos_);
  block* b = rblock_ ? rblock_ : first_;
  std::size_t off = rblock_ ? roff_ : 0;
  for (; n != 0; --n) {
    if (off == block::kItems) {
      b = b->next;
      off = 0;
    }
    std::destroy_at(b->at(off++));
  }
  for (b = rblock_ ? rblock_ : first_; b;) delete std::exchange(b, b->next);
  delete spare_.load(std::memory_order_relaxed);
  while (reserve_) delete std::exchange(reserve_, reserve_->next);
  core_.unlock();
}

}  // namespace capstan
