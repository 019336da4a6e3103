// ticker.hpp - the timeslice ticker: one OS thread that expires every busy
// capability's timeslice every +RTS -C interval, and stops when all are idle.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

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

 private:
  void loop();
  std::chrono::microseconds period_{};
  unsigned ticks_per_slice_ = 1;  // 0: -C0, the scheduler expires slices itself
  std::thread thread_;
  std::atomic<std::uint32_t> quit_{0};
};

}  // namespace capstan::rts
