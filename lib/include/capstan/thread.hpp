// thread.hpp - green threads: forking, identity, yielding.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>

#include "capstan/detail/bridge.hpp"

namespace capstan {

// thread_id names a green thread, uniquely in the process (a later run's
// ids are above an earlier run's); comparable, hashable, printable with fmt.
// Ids compare by value(); an id returned by the runtime also remembers
// where its thread lives, so throw_to and state_of find it at once (an id
// made from a number is found by a search of the live threads).
class thread_id {
 public:
  constexpr thread_id() = default;
  constexpr explicit thread_id(std::uint64_t v) : v_(v) {}
  constexpr explicit thread_id(detail::thread_ref r) : v_(r.id), where_(r.where) {}
  // value is the number GHC would print as ThreadId N.
  constexpr std::uint64_t value() const { return v_; }
  friend constexpr bool operator==(thread_id a, thread_id b) { return a.v_ == b.v_; }
  friend constexpr auto operator<=>(thread_id a, thread_id b) { return a.v_ <=> b.v_; }
  // ref is the runtime's view of the id (not part of the API).
  constexpr detail::thread_ref ref() const { return {v_, where_}; }

 private:
  std::uint64_t v_ = 0;
  std::uintptr_t where_ = 0;  // detail::thread_ref::where
};

// fork_io starts f() as a new green thread at the back of the current
// capability's run queue (GHC's forkIO) and returns its id.
template <class F>
thread_id fork_io(F&& f) {
  return thread_id{detail::spawn<F>(detail::kAnyCapability, std::forward<F>(f))};
}

// fork_on starts f() as a green thread locked to capability `cap` modulo
// num_capabilities() (GHC's forkOn): it never migrates.
template <class F>
thread_id fork_on(unsigned cap, F&& f) {
  return thread_id{detail::spawn<F>(static_cast<long long>(cap), std::forward<F>(f))};
}

// self returns the calling green thread's id.
thread_id self();

// yield moves the calling thread to the back of its run queue and runs the
// next runnable thread, if any.
void yield();

// yield_point is a safe point: it yields if the timeslice has expired.
// Cheap (two loads and a test, inline); call it in long loops that make
// no other runtime call.
inline void yield_point() { detail::safe_point_here(); }

// current_capability returns the number of the capability running the caller.
unsigned current_capability();

// num_capabilities returns the number of capabilities (+RTS -N).
unsigned num_capabilities();

// label_thread attaches a label, shown in diagnostics, to a live thread.
void label_thread(thread_id t, std::string_view label);

// dump_threads writes one line per live green thread to `out` - its state,
// what it is blocked on, its capability or Task, stack in use, time since
// it last ran - from any OS thread while a runtime runs (docs/debugging.md).
void dump_threads(std::FILE* out);

}  // namespace capstan

template <>
struct std::hash<capstan::thread_id> {
  std::size_t operator()(capstan::thread_id t) const noexcept {
    return std::hash<std::uint64_t>{}(t.value());
  }
};

#if __has_include(<fmt/format.h>)
#include <fmt/format.h>
template <>
struct fmt::formatter<capstan::thread_id> : fmt::formatter<std::uint64_t> {
  template <class Ctx>
  auto format(capstan::thread_id t, Ctx& ctx) const {
    return fmt::formatter<std::uint64_t>::format(t.value(), ctx);
  }
};
#endif
