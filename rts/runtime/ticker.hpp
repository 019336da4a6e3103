// ticker.hpp - the timeslice ticker: one OS thread that expires every busy
// capability's timeslice every +RTS -C interval, and stops when all are idle.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace capstan::rts {

// The ticker wakes every kTick (or every timeslice if shorter) and expires
// the timeslices every `timeslice` worth of ticks (GHC's ctxtSwitchTicks);
// the shutdown grace period is measured in ticks too.
// A member of the Runtime (runtime/runtime.hpp): it lives exactly as long
// as the run.
class Ticker {
 public:
  static constexpr std::chrono::microseconds kTick{10000};
  // start starts the ticker thread; throws std::system_error if it cannot.
  void start(std::chrono::microseconds timeslice);
  // stop stops and joins it; a no-op if it is not running.
  void stop();
  // watch_deferred_calls: a safe call has left work waiting on its released
  // capability; the ticker looks every kRetakePoll, and hands such a
  // capability to a spare Task once the same call has lasted a whole poll,
  // until it has seen none for kQuietPolls (Note [Deferred hand-off] in
  // foreign/safe_call.cpp).  One seq_cst load when already watching.
  void watch_deferred_calls() noexcept;

  static constexpr std::chrono::microseconds kRetakePoll{50};
  static constexpr unsigned kQuietPolls = 200;  // 10 ms without a deferred call

 private:
  void loop();
  void nap(std::int64_t period_ns);  // one period, polling deferred calls meanwhile
  bool retake_deferred();            // true if some capability is free with work waiting
  std::chrono::microseconds period_{};
  unsigned ticks_per_slice_ = 1;  // 1 at -C0, where switches expire slices too
  std::thread thread_;
  std::atomic<std::uint32_t> quit_{0};
  std::atomic<std::uint32_t> wake_{0};      // [atomic] futex word the ticker naps on
  std::atomic<std::uint32_t> watching_{0};  // [atomic] Note [Deferred hand-off]
  std::vector<std::uint32_t> seen_;         // [ticker] deferred_calls per capability at the last poll
  unsigned quiet_polls_ = 0;                // [ticker]
};

}  // namespace capstan::rts
