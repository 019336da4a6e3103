// barrier.hpp - std::barrier for green threads: a reusable rendezvous of a
// fixed number of threads, with a completion function run once per phase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "capstan/async_exception.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"

namespace capstan {

namespace detail {
struct no_completion {
  void operator()() noexcept {}
};
}  // namespace detail

// barrier<F> lets `expected` threads meet once per phase: each arrives, the
// last arrival runs completion() (on its own thread, before anyone of the
// phase is released), the phase advances and every waiter of the phase is
// woken.  arrive_and_drop also lowers the expected count for later phases.
// wait and arrive_and_wait need a green thread and are safe points; arrive
// and arrive_and_drop work from any thread (and may run the completion
// there).
template <class CompletionFunction = detail::no_completion>
class barrier {
  static_assert(std::is_nothrow_invocable_v<CompletionFunction&>,
                "capstan::barrier: the completion function must be noexcept-invocable");

 public:
  // arrival_token names the phase an arrive() counted in; pass it to wait.
  class arrival_token {
   public:
    arrival_token(arrival_token&&) = default;
    arrival_token& operator=(arrival_token&&) = default;

   private:
    friend class barrier;
    explicit arrival_token(std::uint64_t p) : phase(p) {}
    std::uint64_t phase;
  };

  // max is the largest expected count.
  static constexpr std::ptrdiff_t max() noexcept { return std::numeric_limits<std::ptrdiff_t>::max(); }

  // barrier(expected, f) expects `expected` (>= 0) arrivals per phase.
  explicit barrier(std::ptrdiff_t expected, CompletionFunction f = CompletionFunction())
      : expected_(expected), pending_(expected), completion_(std::move(f)) {
    if (expected < 0) throw usage_error("capstan::barrier: negative expected count");
  }
  barrier(const barrier&) = delete;
  barrier& operator=(const barrier&) = delete;

  // arrive counts n arrivals in the current phase and returns its token;
  // usage_error if the phase expects fewer.
  [[nodiscard]] arrival_token arrive(std::ptrdiff_t n = 1) { return arrival_token(arrive_n(n, 0)); }

  // wait returns once the phase of `token` has completed.
  void wait(arrival_token&& token) const {
    detail::mvar_core::blocking_point("capstan::barrier::wait");
    wait_phase(token.phase);
  }

  // arrive_and_wait is wait(arrive()).
  void arrive_and_wait() {
    detail::mvar_core::blocking_point("capstan::barrier::arrive_and_wait");
    wait_phase(arrive_n(1, 0));
  }

  // arrive_and_drop arrives once in this phase and expects one arrival
  // fewer in the next ones.
  void arrive_and_drop() { (void)arrive_n(1, 1); }

 private:
  // Note [Completing a phase]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~
  // The last arrival of a phase runs the completion function without
  // holding core_'s lock (it may be long, and may itself use green-thread
  // primitives), then takes the lock again to advance phase_ and serve the
  // phase's waiters.  In between, pending_ is zero, so a further arrival -
  // which std makes undefined - gets usage_error, and a waiter of the
  // phase still sees the old phase_ and queues: the serve finds it.
  // On a green thread the completion and the phase's advance run under
  // uninterruptible_mask: the completion must not throw (std), so a
  // kill_thread or shutdown's kill reaching one of its safe points was
  // std::terminate, and an exception between the completion and the serve
  // would strand the phase's waiters.  A pending exception stays pending
  // after the phase is complete, for the thread's next blocking call or
  // yield: arrive and arrive_and_drop are not safe points (a destructor
  // may arrive), so they raise nothing themselves.  (Note [Shutdown and
  // uninterruptible_mask] in rts/schedule/yield.cpp for shutdown's side.)
  std::uint64_t arrive_n(std::ptrdiff_t n, std::ptrdiff_t drop) {
    core_.lock();
    if (n <= 0 || n > pending_) {
      core_.unlock();
      throw usage_error("capstan::barrier::arrive: more arrivals than the phase expects (or n <= 0)");
    }
    std::uint64_t phase = phase_;
    pending_ -= n;
    expected_ -= drop;
    if (pending_ != 0) {
      core_.unlock();
      return phase;
    }
    core_.unlock();
    std::optional<detail::mask_guard> g;  // See Note [Completing a phase]
    if (detail::green_thread_here()) g.emplace(mask_state::masked_uninterruptible);
    completion_();
    detail::wake_list woken;
    core_.lock();
    ++phase_;
    pending_ = expected_;
    while (detail::waiter* w = core_.front()) woken.add(core_.serve(*w));
    core_.unlock();
    woken.wake_all();
    return phase;  // g restores the mask without raising: see the Note
  }

  void wait_phase(std::uint64_t phase) const {
    core_.lock();
    if (phase_ != phase) {
      core_.unlock();
      return;
    }
    detail::waiter w(detail::waiter::barrier);
    core_.enqueue(w);
    core_.park(w);
  }

  mutable detail::mvar_core core_;  // the queue of waiters
  std::uint64_t phase_ = 0;         // guarded by core_'s lock
  std::ptrdiff_t expected_;         // guarded by core_'s lock
  std::ptrdiff_t pending_;          // guarded by core_'s lock: arrivals still due
  CompletionFunction completion_;   // run by the last arrival only
};

}  // namespace capstan
