// ticker.hpp - the timeslice ticker: one OS thread that expires every busy
// capability's timeslice every +RTS -C interval, and stops when all are idle.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace capstan::rts {

class Ticker {
 public:
  void start(std::chrono::microseconds interval);
  void stop();
  std::uint64_t ticks() const { return ticks_.load(std::memory_order_relaxed); }

 private:
  void loop();
  std::chrono::microseconds interval_{};
  std::thread thread_;
  std::atomic<std::uint32_t> quit_{0};
  std::atomic<std::uint64_t> ticks_{0};
};

extern Ticker ticker;

}  // namespace capstan::rts
