// start_test.cpp - where run() starts the capabilities' OS threads (Note
// [Starting on another CPU], task/task.cpp): off the CPU of the thread
// that goes on to run main, and then free to run on the whole mask.
#include <sched.h>

#include <chrono>
#include <thread>
#include <vector>

#include "capstan_test.hpp"
#include "capability/capability.hpp"
#include "primitives/fault_injection.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"

namespace {

using namespace capstan;

class StartOsThread : public capstan_test::RuntimeTest,
                      public ::testing::WithParamInterface<unsigned> {};

int mask_size() {
  cpu_set_t m;
  return sched_getaffinity(0, sizeof m, &m) == 0 ? CPU_COUNT(&m) : -1;
}

// What a worker started with: its starter's CPU as recorded (-1: it did
// not ask for another) and the size of its mask once running.
struct WorkerStart {
  int creator = -2;
  int mask = -2;
};

// worker_start looks at capability i's worker from inside a run (main).
WorkerStart worker_start(unsigned i) {
  WorkerStart w;
  w.creator = rts::rt.caps[i]->running_task.load(std::memory_order_acquire)->creator_cpu.load(
      std::memory_order_relaxed);
  mvar<int> m;
  fork_on(i, [&] { m.put(mask_size()); });
  w.mask = m.take();
  return w;
}

// Each worker started by run() first ran on a CPU other than its
// starter's, and every capability's thread then runs with the starter's
// whole mask (two CPUs here): a worker left on the narrower mask would be
// pinned for the whole run.
TEST_P(StartOsThread, WorkersStartOffMainsCpuAndKeepTheWholeMask) {
  capstan_test::CpuPin two(2);
  if (!two.ok()) GTEST_SKIP() << "needs two CPUs";
  const unsigned n = GetParam();
  std::vector<int> creator(n, -2), started(n, -2), mask(n, -2);
  run(capstan_test::opts(n), [&] {
    for (unsigned i = 1; i < n; ++i) {
      WorkerStart w = worker_start(i);
      creator[i] = w.creator;
      mask[i] = w.mask;
      // The worker writes start_cpu first thing; it has surely run by the
      // time a thread forked on its capability has.
      started[i] = rts::rt.caps[i]->running_task.load(std::memory_order_acquire)->start_cpu.load(
          std::memory_order_relaxed);
    }
  });
  for (unsigned i = 1; i < n; ++i) {
    SCOPED_TRACE(::testing::Message() << "capability " << i);
    EXPECT_GE(creator[i], 0) << "run() did not ask for another CPU";
    EXPECT_GE(started[i], 0);
    EXPECT_NE(started[i], creator[i]) << "the worker first ran on its starter's CPU";
    EXPECT_EQ(mask[i], 2) << "the worker did not widen its mask back";
  }
}

INSTANTIATE_TEST_SUITE_P(Caps, StartOsThread, ::testing::Values(2u, 4u),
                         capstan_test::caps_name);

// A start whose narrowing is refused (a sandbox that forbids setting
// affinity) is made again without it: the run starts, nothing narrowed.
TEST_F(StartOsThread, ARefusedNarrowingStartsTheWorkerAsBefore) {
  capstan_test::CpuPin two(2);
  if (!two.ok()) GTEST_SKIP() << "needs two CPUs";
  namespace fi = rts::fault_injection;
  fi::fail_narrowed_start.store(0);
  WorkerStart w;
  run(capstan_test::opts(2), [&] { w = worker_start(1); });
  EXPECT_EQ(fi::fail_narrowed_start.load(), -1) << "the injected refusal was not reached";
  fi::fail_narrowed_start.store(-1);
  EXPECT_EQ(w.creator, -1);
  EXPECT_EQ(w.mask, 2);
}

// With one CPU in the mask there is nowhere else to go: workers start
// where they can, and nothing is narrowed.
TEST_F(StartOsThread, WithOneCpuNothingIsNarrowed) {
  capstan_test::CpuPin one(1);
  if (!one.ok()) GTEST_SKIP() << "cannot pin to one CPU";
  WorkerStart w;
  run(capstan_test::opts(2), [&] { w = worker_start(1); });
  EXPECT_EQ(w.creator, -1);
  EXPECT_EQ(w.mask, 1);
}

}  // namespace
