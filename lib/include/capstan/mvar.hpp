// mvar.hpp - GHC's MVar: a box that is empty or full, with blocking take/put.
#pragma once

#include <chrono>
#include <optional>
#include <type_traits>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"
#include "capstan/detail/duration.hpp"

namespace capstan {

namespace detail {
struct mvar_access;  // the runtime's IO manager (rts/io/entry_points.cpp)
}  // namespace detail

// mvar<T> holds at most one T.  Blocking operations park the green thread,
// never the OS thread.  Wake-ups are FIFO and single: one put serves readers
// at the front of the queue and then exactly the oldest taker, handing the
// value over directly (the mvar is never observably full in between).
// Works across capabilities.  Blocking calls need a green thread; try_ calls
// work from any thread while the runtime runs.
template <class T>
class mvar {
 public:
  // mvar() is empty.
  mvar() = default;
  // mvar(v) is full with v.
  explicit mvar(T v) : value_(std::move(v)) {}

  // take waits until the mvar is full, then empties it and returns the value.
  [[gnu::always_inline]] T take() {
    {
      op g(core_);
      if (value_) return take_value(g.woken);
      std::optional<T> dest;
      detail::waiter w;
      w.kind = detail::waiter::take;
      w.slot = &dest;
      core_.enqueue(w);
      g.release_to_park();
      core_.park(w);  // returns with dest filled by the putter
      return std::move(*dest);
    }
  }

  // take_for is take that gives up after `d`: the value, or nullopt if the
  // mvar stayed empty (for this thread) that long.  A put racing with the
  // time-out either hands this thread the value or keeps it - never both.
  template <class Rep, class Period>
  std::optional<T> take_for(const std::chrono::duration<Rep, Period>& d) {
    return take_timed(detail::to_ns(d));
  }

  // try_take_until is take_for until the time point `t`.
  template <class Clock, class Duration>
  std::optional<T> try_take_until(const std::chrono::time_point<Clock, Duration>& t) {
    return take_timed(detail::ns_until(t));
  }

  // read waits until the mvar is full and returns a copy, leaving it full.
  T read() {
    static_assert(std::is_copy_constructible_v<T>, "mvar<T>::read needs a copyable T");
    op g(core_);
    if (value_) return *value_;
    std::optional<T> dest;
    detail::waiter w;
    w.kind = detail::waiter::read;
    w.slot = &dest;
    core_.enqueue(w);
    g.release_to_park();
    core_.park(w);
    return std::move(*dest);
  }

  // put waits until the mvar is empty, then fills it with v.
  [[gnu::always_inline]] void put(T v) {
    op g(core_);
    if (!value_) {
      deliver(std::move(v), g.woken);
      return;
    }
    detail::waiter w;
    w.kind = detail::waiter::put;
    w.slot = &v;
    core_.enqueue(w);
    g.release_to_park();
    core_.park(w);  // the taker moved v out of our frame
  }

  // try_take empties the mvar and returns its value, or nullopt if empty.
  std::optional<T> try_take() {
    op g(core_);
    if (!value_) return std::nullopt;
    return take_value(g.woken);
  }

  // try_put fills the mvar with v and returns true, or returns false if full.
  bool try_put(T v) {
    op g(core_);
    if (value_) return false;
    deliver(std::move(v), g.woken);
    return true;
  }

  // try_read returns a copy of the value, or nullopt if empty.
  std::optional<T> try_read() {
    static_assert(std::is_copy_constructible_v<T>, "mvar<T>::try_read needs a copyable T");
    op g(core_);
    return value_;
  }

  // waiting returns how many threads were blocked on the mvar at the moment
  // of the call (takers and readers when empty, putters when full).
  std::size_t waiting() {
    op g(core_);
    return core_.waiters();
  }

  // is_empty tells whether the mvar was empty at the moment of the call.
  bool is_empty() {
    op g(core_);
    return !value_;
  }

 private:
  // op holds the lock for one operation: see detail::core_op and Note
  // [Killing around an mvar operation].
  using op = detail::core_op;
  friend struct detail::mvar_access;

  // take_wait is take up to the end of its wait: true with the value in
  // dest, or false with what ended the wait in w.outcome, for the caller
  // to raise (mvar_core::raise_outcome) once its own clean-up is done.
  // The lock guard's scope ends here, before anything is thrown: a frame
  // with nothing to clean up at the throw costs the unwinder no landing
  // pad and no _Unwind_Resume (Note [Throwing from the caller's frame]).
  bool take_wait(std::optional<T>& dest, detail::waiter& w) {
    op g(core_);
    if (value_) {
      dest.emplace(take_value(g.woken));
      return true;
    }
    w.kind = detail::waiter::take;
    w.slot = &dest;
    core_.enqueue(w);
    g.release_to_park();
    core_.park_wait(w);  // returns with dest filled by a putter, or an outcome
    return w.outcome == detail::waiter::served;
  }

  std::optional<T> take_timed(long long ns) {
    op g(core_);
    if (value_) return take_value(g.woken);
    if (ns <= 0) return std::nullopt;
    std::optional<T> dest;
    detail::waiter w;
    w.kind = detail::waiter::take;
    w.slot = &dest;
    core_.enqueue(w);
    g.release_to_park();
    if (!core_.park_timed(w, ns)) return std::nullopt;
    return dest;
  }

  // deliver puts v into an empty mvar (lock held): readers at the front get
  // copies, then the oldest taker gets v; with no taker the mvar becomes full.
  void deliver(T v, detail::wake_list& woken) {
    while (detail::waiter* w = core_.front()) {
      auto* dest = static_cast<std::optional<T>*>(w->slot);
      if constexpr (std::is_copy_constructible_v<T>) {
        if (w->kind == detail::waiter::read) {
          dest->emplace(v);
          woken.add(core_.serve(*w));
          continue;
        }
      }
      dest->emplace(std::move(v));  // a taker: putters never wait on an empty mvar
      woken.add(core_.serve(*w));
      return;
    }
    value_.emplace(std::move(v));
  }
  // take_value empties a full mvar (lock held) and returns its value; the
  // mvar just became empty, so any waiter is a putter, and the oldest
  // one's value goes in and it is woken.  If moving that value in throws,
  // the take does not happen: the value goes back, the putter stays
  // queued, and the exception leaves the take.  (Left empty with a putter
  // queued, the mvar's next put took the putter's T for a taker's slot.)
  T take_value(detail::wake_list& woken) {
    T v = std::move(*value_);
    value_.reset();
    if (detail::waiter* w = core_.front()) {
      try {
        value_.emplace(std::move(*static_cast<T*>(w->slot)));
      } catch (...) {
        put_back(std::move(v));
        throw;
      }
      woken.add(core_.serve(*w));
    }
    return v;
  }
  // put_back restores a value take_value had moved out.  A T whose move
  // throws twice in a row ends the program here (noexcept) rather than
  // leave an empty mvar with a putter queued.
  void put_back(T&& v) noexcept { value_.emplace(std::move(v)); }

  detail::mvar_core core_;
  std::optional<T> value_;  // guarded by core_'s lock
};

}  // namespace capstan
