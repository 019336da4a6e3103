// clock.hpp - the runtime's monotonic clock, in nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace capstan::rts {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace capstan::rts
