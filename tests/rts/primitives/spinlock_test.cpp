// spinlock_test.cpp - spin_lock (under SpinLock and an mvar's lock)
// never starves a holder that the kernel descheduled: after a
// short spin the waiter gives its OS thread away (primitives/spin.hpp).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "primitives/spinlock.hpp"

namespace {

using capstan::rts::spin_lock;

// The first CPU this process may run on.
int first_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

// on_one_cpu_fifo pins the calling thread to `cpu` under SCHED_FIFO
// priority 1; false if the system refuses (no CAP_SYS_NICE, a container).
bool on_one_cpu_fifo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) return false;
  sched_param p{};
  p.sched_priority = 1;
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0;
}

// Holder and waiter share one CPU as SCHED_FIFO threads of equal priority,
// so the kernel runs the holder again only when the waiter gives the CPU
// away.  The holder takes the lock and yields the CPU while holding it (a
// descheduled holder); the waiter then asks for the lock.  A waiter that
// only spun would spin forever; the watchdog (an ordinary thread on any
// CPU) then demotes the waiter so that the test ends, failing.
TEST(SpinLock, AWaiterGivesTheCpuToADescheduledHolder) {
  int cpu = first_allowed_cpu();
  ASSERT_GE(cpu, 0);
  std::atomic<bool> word{false};
  std::atomic<int> ready{0};      // threads set up (or refused)
  std::atomic<bool> refused{false}, taken{false}, acquired{false}, demoted{false};

  std::thread holder([&] {
    if (!on_one_cpu_fifo(cpu)) refused.store(true);
    ready.fetch_add(1);
    while (ready.load() < 2) sched_yield();
    if (refused.load()) return;
    spin_lock(word);
    taken.store(true);
    sched_yield();  // descheduled while holding: the waiter runs now
    word.store(false, std::memory_order_release);
  });
  std::thread waiter([&] {
    if (!on_one_cpu_fifo(cpu)) refused.store(true);
    ready.fetch_add(1);
    while (ready.load() < 2) sched_yield();
    if (refused.load()) return;
    while (!taken.load()) sched_yield();
    spin_lock(word);  // the holder is off the CPU: only giving it away lets it finish
    acquired.store(true);
    word.store(false, std::memory_order_release);
  });

  // Failure guard only: the lock passes within microseconds when it works.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!acquired.load() && !refused.load() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!acquired.load() && !refused.load()) {
    sched_param p{};
    pthread_setschedparam(waiter.native_handle(), SCHED_OTHER, &p);  // let the holder run
    demoted.store(true);
  }
  holder.join();
  waiter.join();
  if (refused.load()) GTEST_SKIP() << "SCHED_FIFO on one CPU is not permitted here";
  EXPECT_FALSE(demoted.load()) << "the waiter spun on one CPU without ever letting the holder run";
  EXPECT_TRUE(acquired.load());
}

}  // namespace
