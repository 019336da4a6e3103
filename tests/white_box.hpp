// white_box.hpp - helpers for the white-box tests of the runtime's units:
// waiting for a condition with a deadline as the failure guard, random
// spins to shake interleavings, and asking the kernel whether some thread
// of this process is asleep on a given futex word.
#pragma once

#include <dirent.h>
#include <sys/syscall.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <memory>
#include <thread>

#include "capstan/options.hpp"
#include "capstan_test.hpp"
#include "runtime/runtime.hpp"

namespace capstan_test {

// WhiteBoxRuntime: the Runtime object for a test that drives rts units by
// hand without a run (Note [The runtime's life cycle]): constructed fresh
// here, destroyed with the fixture.  Capabilities a test puts in rt.caps
// stay the test's: they are taken out before the Runtime goes.  Declare it
// first in a fixture, so it outlives everything that uses it.
class WhiteBoxRuntime {
 public:
  explicit WhiteBoxRuntime(const capstan::options& o = {}) {
    std::construct_at(&capstan::rts::runtime_slot.rt, o);
  }
  WhiteBoxRuntime(const WhiteBoxRuntime&) = delete;
  WhiteBoxRuntime& operator=(const WhiteBoxRuntime&) = delete;
  ~WhiteBoxRuntime() {
    capstan::rts::rt.caps.clear();
    std::destroy_at(&capstan::rts::runtime_slot.rt);
  }
};

// eventually polls pred from a plain OS thread until it holds; false if
// the failure guard (kWaitGuard) passed first.
template <class Pred>
bool eventually(Pred pred) {
  return os_wait_until(pred);
}

// spin burns about n loop turns: a random one before each racing step
// moves the step to a different point of the other side's protocol.
inline void spin(unsigned n) {
  for (unsigned i = 0; i < n; ++i) asm volatile("" ::: "memory");
}

// Rng: a small per-thread generator for spin lengths.
struct Rng {
  explicit Rng(std::uint64_t seed) : g(seed) {}
  unsigned below(unsigned n) { return static_cast<unsigned>(g() % n); }
  std::mt19937_64 g;
};

// SpinBarrier releases n spinning threads within a cache-line transfer of
// each other (std::barrier may wake them microseconds apart), so that a
// random spin after it scans the racing steps across each other.
class SpinBarrier {
 public:
  explicit SpinBarrier(unsigned n) : n_(n) {}
  void arrive_and_wait() {
    unsigned gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.store(gen + 1, std::memory_order_release);
      return;
    }
    for (unsigned i = 0; gen_.load(std::memory_order_acquire) == gen; ++i)
      if ((i & 1023) == 1023) std::this_thread::yield();  // the other may be descheduled
  }

 private:
  const unsigned n_;
  std::atomic<unsigned> count_{0};
  std::atomic<unsigned> gen_{0};
};

// thread_sleeps_on tells whether some thread of this process is blocked in
// the futex system call on `word` right now (read from
// /proc/self/task/<tid>/syscall: the system call number, then its
// arguments; a thread not blocked in a system call reads "running").
inline bool thread_sleeps_on(const void* word) {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::string path = std::string("/proc/self/task/") + e->d_name + "/syscall";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    long nr = -1;
    unsigned long arg0 = 0;
    if (std::fscanf(f, "%ld %lx", &nr, &arg0) == 2 && nr == SYS_futex &&
        arg0 == reinterpret_cast<std::uintptr_t>(word))
      found = true;
    std::fclose(f);
    if (found) break;
  }
  closedir(dir);
  return found;
}

}  // namespace capstan_test
