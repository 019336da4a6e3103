// async.hpp - scoped concurrent actions (Haskell's async package): async<R>
// runs a function in a green thread whose result can be waited for, and
// race, concurrently and map_concurrently combine several; none lets a
// thread outlive the scope that started it.
//
// Design: every started function is a child of a detail::async_group,
// which records each child's outcome in a slot owned by the caller and
// learns of completions through a chan of child indices; cancelling kills
// the unfinished children and waits for all of them.  See Note [Async
// threads].  Rejected: one mvar per child (race would need to wait on two
// mvars at once, which capstan cannot), and a condition variable (it would
// not be interruptible, nor seen by deadlock detection).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "capstan/async_exception.hpp"
#include "capstan/chan.hpp"
#include "capstan/detail/bridge.hpp"
#include "capstan/errors.hpp"
#include "capstan/mutex.hpp"
#include "capstan/thread.hpp"

namespace capstan {

namespace detail {

// async_value_t: what a child's result is stored as (std::monostate for void).
template <class R>
using async_value_t = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

// async_slot: one child's outcome.  Written by the child before it reports
// completion, read by the caller only after it has learnt of it (the chan
// that carries the report orders the two: Note [Async threads]).
template <class R>
struct async_slot {
  std::optional<async_value_t<R>> value;
  std::exception_ptr error;

  template <class F>
  void run(F& f) {
    if constexpr (std::is_void_v<R>) {
      f();
      value.emplace();
    } else {
      value.emplace(f());
    }
  }
  // get returns the result, or rethrows the child's exception.
  async_value_t<R> get() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

// Note [Async threads]
// ~~~~~~~~~~~~~~~~~~~~~
// An async_group starts children and must learn of each one's end without
// a lost wake-up, and without ever leaving a child running past the
// group's life.  The protocol:
//  * start() forks the child inside uninterruptible_mask, so the child
//    begins masked uninterruptibly (forked threads inherit the mask).  The
//    child runs f through the mask_restore of the fork site: f sees the
//    caller's mask state, as if forked plainly.  Whatever ends f - a
//    result, its own exception, or an asynchronous one such as a cancel's
//    thread_killed - lands in the child's slot.  Back in the
//    uninterruptible mask, nothing can be raised in it after f, and a
//    throw_to arriving then waits until the child has finished, and is
//    dropped.
//  * The report - the child's index written into the group's chan
//    `done_` - is sent by the destructor of the child's closure, after f's
//    captures are destroyed.  The runtime destroys a thread's closure
//    whether or not the thread ran: a thread that shutdown reclaims before
//    it started (Note [Shutdown checkpoints]) still reports, with
//    thread_killed in its slot.  Shutdown kills threads at checkpoints
//    whatever their mask, so the report uses a chan write without the
//    safe point (chan::write_no_checkpoint): it can neither be skipped nor
//    throw from the destructor - not even bad_alloc, since the group
//    reserved room for all its reports when it was made (chan::reserve).
//  * The write is the child's last touch of the group: a chan write
//    touches the chan no more once its item can be read (Note [Chan
//    lifetime]), so the reader may destroy the group as soon as it has
//    the index.
//  * The caller learns of ends by reading `done_`.  The chan's state word
//    decides between "the reader is parked: hand it the index" and "no
//    reader yet: keep it", so a report is never lost whichever comes first
//    (Note [Chan readers waiting]); and a chan read is an ordinary
//    interruptible, deadlock-detected wait.  The write's publishing step
//    (a release) and the read's acquire of it also order the child's slot
//    writes before the caller's reads of them.
//  * cancel_all() kills every child not yet reported, then reads reports
//    until every started child has reported, all inside an uninterruptible
//    mask (Haskell's uninterruptibleCancel): a caller killed while
//    cancelling still waits for its children, so destroying a group (or an
//    async) never leaves a thread behind.  A child that catches
//    thread_killed and carries on delays that, as in Haskell.
class async_group {
  // child is a child thread's closure: runs f into the slot; its
  // destructor - which runs whether or not the thread ever started -
  // reports to the group (Note [Async threads]).
  template <class R, class Fn>
  struct child {
    async_group* group;  // null once moved from: only one copy reports
    std::size_t index;
    async_slot<R>* slot;
    mask_restore restore;
    std::optional<Fn> fn;

    template <class F>
    child(async_group* g, std::size_t i, async_slot<R>* s, mask_restore r, F&& f)
        : group(g), index(i), slot(s), restore(r), fn(std::forward<F>(f)) {}
    // The source gives up its report only once f has moved: if Fn's move
    // throws, the source still reports (and the half-made copy, whose
    // destructor does not run, never does).
    child(child&& o) noexcept(std::is_nothrow_move_constructible_v<Fn>)
        : group(o.group), index(o.index), slot(o.slot), restore(o.restore),
          fn(std::move(o.fn)) {
      o.group = nullptr;
    }
    child& operator=(child&&) = delete;

    void operator()() {
      try {
        restore([&] { slot->run(*fn); });
      } catch (...) {
        slot->error = std::current_exception();
        count_ended_by(slot->error);
      }
    }
    ~child() {
      if (!group) return;
      fn.reset();  // f's captures are gone before the report
      if (!slot->value && !slot->error)  // never ran: killed by shutdown before it started
        slot->error = thread_killed_ptr();  // made once: the report path allocates nothing
      group->report(index);
    }
  };

 public:
  // Room for every child's report is reserved here, where bad_alloc may
  // still be thrown: a report, sent from a noexcept destructor, then never
  // allocates (Note [Async threads]).
  // `what` names the public call in the error a plain OS thread gets.
  async_group(std::size_t n, const char* what) : ids_(n), reported_(n, 0) {
    mvar_core::blocking_point(what);
    done_.reserve(n);
  }
  async_group(const async_group&) = delete;
  async_group& operator=(const async_group&) = delete;
  // The destructor cancels: see Note [Async threads].
  ~async_group() { cancel_all(); }

  // start runs f as child i, its outcome going to slot.
  template <class R, class F>
  void start(std::size_t i, async_slot<R>& slot, F&& f) {
    uninterruptible_mask([&](mask_restore restore) {
      // The closure first: if making it throws (f's copy or move), nothing
      // was started and nothing will report.  Counted next: from here the
      // closure reports whatever happens - if forking fails, or moving it
      // into the thread throws, the one left here reports (with
      // thread_killed), and cancel_all reads that report.
      child<R, std::decay_t<F>> c(this, i, &slot, restore, std::forward<F>(f));
      ++started_;
      ids_[i] = fork_io(std::move(c));
    });
  }

  // next_finished waits for a child to finish and returns its index.
  std::size_t next_finished() {
    std::size_t i = done_.read();
    reported_[i] = 1;  // (no runtime call until return: nothing can interrupt)
    --started_;
    return i;
  }

  // kill_child kills a child for a cancel.  Deadlock detection raises
  // blocked_indefinitely in a killer only when its kill leads to no raised
  // thread (Note [Breaking a deadlock] in rts/exception/deadlock.cpp): the
  // child is a thrower in a cycle, raised too, or blocked while unwinding,
  // where no exception can reach it.  Either way the cancel goes on to
  // wait for its report instead of throwing out of a destructor.
  static void kill_child(thread_id t) {
    try {
      kill_thread(t);
    } catch (const blocked_indefinitely&) {
    }
  }

  // report is a child's "finished": the last touch of the group.
  void report(std::size_t i) noexcept { done_.write_no_checkpoint(i); }

  // any_unseen tells whether some child has finished and not been reported.
  bool any_unseen() { return done_.size() != 0; }
  bool reported(std::size_t i) const { return reported_[i] != 0; }
  thread_id id(std::size_t i) const { return ids_[i]; }

  // cancel_all kills every running child and waits until each has finished.
  void cancel_all() {
    if (started_ == 0) return;
    if (!mvar_core::can_block()) [[unlikely]] return cancel_off_runtime();
    mask_guard g(mask_state::masked_uninterruptible);  // left without raising
    // The reports already in first: a group that outlived the run which
    // started its children (an async kept past run()) has them all, and
    // its ids name threads of an earlier run, which kill_thread refuses.
    while (started_ != 0 && any_unseen()) next_finished();
    for (std::size_t i = 0; i < ids_.size(); ++i)
      if (!reported_[i] && ids_[i] != thread_id{}) kill_child(ids_[i]);
    while (started_ != 0) {
      try {
        next_finished();
      } catch (const blocked_indefinitely&) {
        // A child caught thread_killed and blocked forever: it was woken
        // too, and will report.
      }
    }
  }

 private:
  // cancel_off_runtime is cancel_all on an OS thread that runs no green
  // thread: after the run that started the children (shutdown destroyed
  // every child's closure, which reported), or on a plain thread.  Reading
  // the reports is then all there is to do.  A child still running can be
  // neither killed nor waited for from here, and its report would land in
  // a destroyed group: a fatal misuse, said before aborting.
  [[gnu::cold, gnu::noinline]] void cancel_off_runtime() noexcept {
    while (started_ != 0) {
      std::optional<std::size_t> i = done_.try_read();
      if (!i) {
        std::fputs("capstan::async: destroyed on an OS thread that runs no green thread while its "
                   "thread still runs; destroy, cancel or wait for it on a green thread\n",
                   stderr);
        std::abort();
      }
      reported_[*i] = 1;
      --started_;
    }
  }

  std::vector<thread_id> ids_;   // [owner: the caller] child i's thread, once started
  std::vector<char> reported_;   // [owner: the caller] child i's report was read
  std::size_t started_ = 0;      // [owner: the caller] started, report not yet read
  chan<std::size_t> done_;       // children's reports (Note [Async threads])
};

}  // namespace detail

// async<R> runs a function in a new green thread (Haskell's withAsync):
// wait for its result, or cancel it.  Move-only; destroying (or assigning
// over) an async whose thread still runs cancels that thread and waits for
// it, so a scope never leaks a thread.  Needs a green thread; an async
// kept past the run() that started it may be destroyed anywhere (its
// thread ended with that run), and waited for only by a green thread of a
// later run.  Destroying one on a plain OS thread while its thread runs is
// a fatal error, said on stderr.
template <class R>
class async {
  static_assert(!std::is_reference_v<R>, "capstan::async: the function must return a value, not a reference");

 public:
  // async(f) starts f() as a green thread (fork_io) with the caller's mask state.
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, async>)
  explicit async(F&& f) : st_(std::make_unique<state>()) {
    st_->group.start(0, st_->slot, std::forward<F>(f));
  }
  async(async&&) noexcept = default;
  async& operator=(async&&) noexcept = default;

  // wait blocks until the thread has finished, then returns its result or
  // rethrows its exception; a second call - even one made while the first
  // still waits, from another thread - is a usage_error.
  R wait() {
    state& s = get("wait");
    detail::mvar_core::blocking_point("capstan::async::wait");
    {
      std::lock_guard<mutex> g(s.lock);  // Note [Sharing an async]
      if (s.waited) throw usage_error("capstan::async::wait: the result was already taken by an earlier wait()");
      s.collect();
      s.waited = true;
    }
    if constexpr (std::is_void_v<R>) s.slot.get(); else return s.slot.get();
  }

  // ready tells whether the thread has finished (wait would not block).
  bool ready() {
    state& s = get("ready");
    return s.collected.load(std::memory_order_acquire) || s.group.any_unseen();
  }

  // cancel kills the thread (kill_thread) unless it has finished, and waits
  // until it has; wait() then rethrows thread_killed, or returns the result
  // if the thread finished first.  Any green thread may cancel, while
  // another waits (Note [Sharing an async]).
  void cancel() {
    state& s = get("cancel");
    detail::mvar_core::blocking_point("capstan::async::cancel");
    uninterruptible_mask([&] {  // Haskell's uninterruptibleCancel, as cancel_all
      if (s.collected.load(std::memory_order_acquire)) return;
      // A no-op once it has finished (ids are never reused); skipped when
      // its report is in, which also covers an async kept from an earlier
      // run, whose id kill_thread refuses.
      if (!s.group.any_unseen()) detail::async_group::kill_child(s.group.id(0));
      std::lock_guard<mutex> g(s.lock);
      for (;;) {
        try {
          s.collect();
          return;
        } catch (const blocked_indefinitely&) {
          // As cancel_all: the child was woken too, and will report.
        }
      }
    });
  }

  // id names the thread.
  thread_id id() const {
    if (!st_) throw usage_error("capstan::async::id: the async was moved from");
    return st_->group.id(0);
  }

 private:
  // Note [Sharing an async]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~
  // An async may be waited for by one green thread and cancelled by
  // another (a watchdog), as Haskell's may.  The group's report is read
  // once, by whichever of them gets there first (collect, under `lock`);
  // the others find `collected` set.  The reader blocks in the chan read
  // while holding the lock, so the others wait on the lock instead - for
  // the same event.  An exception that interrupts the reader releases the
  // lock and leaves the report unread, for the next to read.  cancel
  // kills before it takes the lock: a waiter holding it is waiting for
  // exactly that thread to end.  The async itself must outlive every call
  // on it, as any object must.
  struct state {
    detail::async_slot<R> slot;       // destroyed after group: the child writes it
    detail::async_group group{1, "capstan::async"};
    mutex lock;                       // guards the group's reads, collect, waited
    bool waited = false;              // [lock]
    std::atomic<bool> collected{false};  // [lock writes; ready() and cancel read]: the report was read
    void collect() {  // with `lock` held
      if (group.reported(0)) return;
      group.next_finished();
      collected.store(true, std::memory_order_release);
    }
  };
  state& get(const char* what) {
    if (!st_) throw usage_error(std::string("capstan::async::") + what + ": the async was moved from");
    return *st_;
  }
  std::unique_ptr<state> st_;
};

template <class F>
async(F) -> async<std::invoke_result_t<F&>>;

// race runs f and g in two green threads; the first to finish wins: its
// result (std::monostate for void) is returned as alternative 0 (f) or 1
// (g), or its exception rethrown, after the other has been cancelled and
// has finished.
template <class F, class G>
auto race(F&& f, G&& g) {
  using A = detail::async_value_t<std::invoke_result_t<std::decay_t<F>&>>;
  using B = detail::async_value_t<std::invoke_result_t<std::decay_t<G>&>>;
  detail::async_slot<std::invoke_result_t<std::decay_t<F>&>> sa;
  detail::async_slot<std::invoke_result_t<std::decay_t<G>&>> sb;
  detail::async_group group(2, "capstan::race");  // after the slots: cancels before they go
  group.start(0, sa, std::forward<F>(f));
  group.start(1, sb, std::forward<G>(g));
  std::size_t first = group.next_finished();
  group.cancel_all();
  if (first == 0) return std::variant<A, B>(std::in_place_index<0>, sa.get());
  return std::variant<A, B>(std::in_place_index<1>, sb.get());
}

// concurrently runs f and g in two green threads and returns both results
// (std::monostate for void); if either throws, the other is cancelled and
// has finished before the exception is rethrown.
template <class F, class G>
auto concurrently(F&& f, G&& g) {
  using A = detail::async_value_t<std::invoke_result_t<std::decay_t<F>&>>;
  using B = detail::async_value_t<std::invoke_result_t<std::decay_t<G>&>>;
  detail::async_slot<std::invoke_result_t<std::decay_t<F>&>> sa;
  detail::async_slot<std::invoke_result_t<std::decay_t<G>&>> sb;
  detail::async_group group(2, "capstan::concurrently");
  group.start(0, sa, std::forward<F>(f));
  group.start(1, sb, std::forward<G>(g));
  for (int k = 0; k < 2; ++k) {
    std::size_t i = group.next_finished();
    if ((i == 0 ? sa.error : sb.error) != nullptr) {
      group.cancel_all();
      std::rethrow_exception(i == 0 ? sa.error : sb.error);
    }
  }
  return std::pair<A, B>(std::move(*sa.value), std::move(*sb.value));
}

// map_concurrently calls f on every element of r, each call in its own
// green thread, and returns the results in r's order (nothing for a void
// f); if a call throws, the others are cancelled and have finished before
// the exception is rethrown.  f is shared by the calls.
template <class Range, class F>
auto map_concurrently(Range&& r, F&& f) {
  using E = std::ranges::range_reference_t<Range>;
  using R = std::invoke_result_t<F&, E>;
  // Elements a reference names are passed by reference; prvalues are kept.
  using Held = std::conditional_t<std::is_lvalue_reference_v<E>,
                                  std::reference_wrapper<std::remove_reference_t<E>>,
                                  std::remove_cvref_t<E>>;
  std::vector<Held> items;
  for (auto&& x : r) items.emplace_back(std::forward<decltype(x)>(x));
  std::vector<detail::async_slot<R>> slots(items.size());
  detail::async_group group(items.size(), "capstan::map_concurrently");  // after the slots: cancels before they go
  for (std::size_t i = 0; i < items.size(); ++i)
    group.start(i, slots[i], [&f, &item = items[i]]() -> R {
      if constexpr (std::is_lvalue_reference_v<E>) return f(item.get());
      else return f(static_cast<E>(std::move(item)));
    });
  for (std::size_t k = 0; k < items.size(); ++k) {
    std::size_t i = group.next_finished();
    if (slots[i].error) {
      group.cancel_all();
      std::rethrow_exception(slots[i].error);
    }
  }
  if constexpr (!std::is_void_v<R>) {
    std::vector<R> out;
    out.reserve(slots.size());
    for (auto& s : slots) out.push_back(std::move(*s.value));
    return out;
  }
}

}  // namespace capstan
