// parker_test.cpp - the sticky wake-up of parked OS threads (Note [Sticky
// wake-up]): an unpark before the park is never lost.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "primitives/parker.hpp"

namespace {

using capstan::rts::Parker;

TEST(Parker, UnparkBeforeParkIsRemembered) {
  Parker p;
  p.unpark();
  p.park();  // must return at once
  SUCCEED();
}

// Ping-pong between two OS threads through two parkers, with the
// unparker racing the parker on every round: a lost wake-up hangs (the
// test's timeout catches it) and the counts must match exactly.
TEST(ParkerStress, NoLostWakeUpsInAPingPong) {
  Parker a, b;
  std::atomic<long> ball{0};
  constexpr long kRounds = 100000;
  std::thread other([&] {
    for (long i = 0; i < kRounds; ++i) {
      b.park();
      ball.fetch_add(1, std::memory_order_relaxed);
      a.unpark();
    }
  });
  for (long i = 0; i < kRounds; ++i) {
    b.unpark();
    a.park();
  }
  other.join();
  EXPECT_EQ(ball.load(), kRounds);
}

}  // namespace
