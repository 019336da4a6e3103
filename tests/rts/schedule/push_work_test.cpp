// push_work_test.cpp - Note [Pushing work]: a busy capability hands
// surplus threads to an idle one only when a CPU is free for it.  (Which
// idle capability takes them - an awake one, else the lowest-numbered - is
// measured in docs/benchmarks.md, "More capabilities than cores": a test of
// it would race the stall watch, which may wake any sleeper.)
#include <atomic>
#include <chrono>

#include "capstan_test.hpp"
#include "runtime/runtime.hpp"

namespace {

using capstan::rts::rt;
using capstan_test::RuntimeTest;
using capstan_test::busy_work;

// fork_batch forks n threads of busy_work(100) each from main and waits for them:
// a queue that stays long for far more than the push delay (kLongQueueNs).
void fork_batch(int n) {
  std::atomic<int> done{0};
  capstan::mvar<int> all;
  for (int i = 0; i < n; ++i)
    capstan::fork_io([&, n] {
      busy_work(100);
      if (done.fetch_add(1) + 1 == n) all.put(1);
    });
  all.take();
}

std::uint64_t pushed() {
  std::uint64_t n = 0;
  for (const auto& c : capstan::statistics().capabilities) n += c.threads_pushed;
  return n;
}

class PushWork : public RuntimeTest {};

// One CPU, two capabilities: the second could only time-slice with the
// first, so nothing is pushed to it.  With two CPUs, the same run pushes
// (the check that the batch is long enough to be pushed at all).
TEST_F(PushWork, NothingIsPushedWithoutAFreeCpu) {
  {
    capstan_test::CpuPin pin(1);
    ASSERT_TRUE(pin.ok()) << "sched_setaffinity failed";
    capstan::run(capstan_test::opts(2), [] {
      ASSERT_EQ(rt.n_cpus, 1u);
      fork_batch(2000);
    });
    EXPECT_EQ(pushed(), 0u) << "threads were pushed to a capability with no CPU to run on";
  }
  capstan_test::CpuPin two(2);
  if (!two.ok()) GTEST_SKIP() << "fewer than 2 CPUs: the control run cannot push";
  capstan::run(capstan_test::opts(2), [] { fork_batch(2000); });
  EXPECT_GT(pushed(), 0u) << "the control run pushed nothing: the batch is too short to test";
}

}  // namespace
