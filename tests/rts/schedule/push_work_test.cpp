// push_work_test.cpp - Note [Pushing work]: a busy capability hands
// surplus threads to an idle one only when a CPU is free for it.  (Which
// idle capability takes them - an awake one, else the lowest-numbered - is
// measured in docs/benchmarks.md, "More capabilities than cores": a test of
// it would race the stall watch, which may wake any sleeper.)
#include <atomic>
#include <chrono>
#include <vector>

#include "capstan_test.hpp"
#include "runtime/runtime.hpp"
#include "schedule/pick.hpp"
#include "task/task.hpp"

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

// A thread requeued while it still runs on its stack (`leaving`: Note
// [Requeued while still running] in schedule/steal.cpp) must stay: the
// capability that took it would switch into a context not yet saved.
// push_work skipped only locked threads, and a yield_point that let a
// thread back from a safe call in first (requeueing the running thread at
// the front, the returning one ahead of it) and then pushed half the
// queue sent the running thread to an idle capability: SIGSEGV in
// capstan_switch under load at -N4.  Here every waiting thread is marked
// as the running one is, and a push must move none of them.
TEST_F(PushWork, AThreadStillOnItsStackIsNeverPushed) {
  capstan_test::CpuPin two(2);
  if (!two.ok()) GTEST_SKIP() << "fewer than 2 CPUs: nothing is ever pushed";
  // No timeslice: every fork is a safe point, and an expiry during the
  // loop would let the forked threads run before they are marked.
  capstan::run(capstan_test::opts(2, std::chrono::seconds(30)), [] {
    using namespace capstan::rts;
    Capability* cap = my_task()->cap;
    Capability* other = rt.caps[cap->no == 0 ? 1 : 0];
    ASSERT_TRUE(capstan_test::green_wait_until(
        [&] { return other->idle.load(std::memory_order_relaxed); }));
    constexpr int kThreads = 40;
    std::atomic<int> ran{0};
    for (int i = 0; i < kThreads; ++i) capstan::fork_io([&] { ++ran; });
    std::vector<Thread*> waiting;
    for (Thread* t = cap->run_queue.front(); t; t = t->link) {
      t->leaving.store(true, std::memory_order_relaxed);
      waiting.push_back(t);
    }
    // Normally all 40; fewer only if the idle capability stole some while
    // this OS thread was descheduled between two forks (a steal needs a
    // stall of about 1 ms).  Enough for push_work to act either way.
    ASSERT_GE(waiting.size(), std::size_t{8});
    push_work(cap);  // no safe point since the marks: nothing ran
    int moved = 0;
    for (Thread* t : waiting) {
      if (t->cap != cap) ++moved;
      t->leaving.store(false, std::memory_order_release);
    }
    EXPECT_EQ(moved, 0) << "threads still on their stacks were pushed to another capability";
    EXPECT_EQ(cap->run_queue.size(), waiting.size());
    while (ran.load() < kThreads) capstan::yield();
  });
}

}  // namespace
