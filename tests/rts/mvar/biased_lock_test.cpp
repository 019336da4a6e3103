// biased_lock_test.cpp - mvar locks biased to the one capability's holder:
// who makes a biased mvar, who revokes it, that a revocation keeps every
// value, and that the IO manager's own boxes never need one (Note [Biased
// locks] in capstan/detail/mvar_core.hpp).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "capstan_test.hpp"
#include "mvar/biased_locks.hpp"
#include "primitives/sanitizer.hpp"
#include "runtime/runtime.hpp"

namespace {

using capstan::detail::mvar_core;

// The lock of an mvar<T>: its first member (mvar.hpp; a standard-layout
// class, so the addresses coincide).
template <class T>
mvar_core& core_of(capstan::mvar<T>& m) {
  return reinterpret_cast<mvar_core&>(m);
}

// Biased locks need one capability, membarrier and no ThreadSanitizer.
bool bias_expected(unsigned caps) {
  return caps == 1 && !capstan::rts::san::tsan() && capstan::rts::rt.membarrier_ok;
}

class BiasedLocks : public capstan_test::WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(BiasedLocks);

// Only the holder of the one capability makes biased mvars: not a
// capability of a run with several, not a plain OS thread, not a safe
// call's function.
TEST_P(BiasedLocks, OnlyTheOneCapabilityMakesBiasedLocks) {
  bool green = false, os_thread = true, in_safe_call = true, stats = false;
  run([&] {
    mvar_core c;
    green = c.biased();
    std::thread([&] {
      mvar_core d;
      os_thread = d.biased();
    }).join();
    capstan::safe_call([&] {
      mvar_core e;
      in_safe_call = e.biased();
    });
    stats = capstan::statistics().biased_locks;
  });
  EXPECT_EQ(green, bias_expected(caps()));
  EXPECT_EQ(stats, bias_expected(caps()));
  EXPECT_FALSE(os_thread);
  EXPECT_FALSE(in_safe_call);
}

// A plain OS thread's try_put revokes a biased mvar once; the value it puts
// reaches the green thread blocked on it, and later operations from both
// sides keep working through the shared lock.
TEST_P(BiasedLocks, AnOsThreadRevokesOnceAndEveryValueArrives) {
  constexpr int kValues = 200;
  std::uint64_t before = 0, after = 0;
  bool biased_before = false, biased_after = true;
  long sum = 0;
  run([&] {
    capstan::mvar<int> m;
    capstan::mvar<int> back;
    biased_before = core_of(m).biased();
    before = capstan::detail::lock_revocations();
    std::thread os([&] {
      for (int i = 1; i <= kValues; ++i) {
        while (!m.try_put(i)) std::this_thread::yield();
        std::optional<int> ack;
        while (!(ack = back.try_take())) std::this_thread::yield();
        EXPECT_EQ(*ack, i);
      }
    });
    for (int i = 1; i <= kValues; ++i) {
      int v = m.take();
      sum += v;
      back.put(v);
    }
    os.join();
    biased_after = core_of(m).biased();
    after = capstan::detail::lock_revocations();
  });
  EXPECT_EQ(sum, kValues * (kValues + 1) / 2);
  EXPECT_EQ(biased_before, bias_expected(caps()));
  EXPECT_FALSE(biased_after);
  // m and back, once each, however many operations followed.
  EXPECT_EQ(after - before, bias_expected(caps()) ? 2u : 0u);
}

// Sleeps and fd waits go through boxes that the IO thread fills: they are
// shared from the start, so no wait revokes anything.
TEST_P(BiasedLocks, IoWaitsRevokeNothing) {
  std::uint64_t before = 0, after = 0;
  run([&] {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    before = capstan::detail::lock_revocations();
    for (int i = 0; i < 50; ++i) capstan::sleep_for(std::chrono::microseconds(100));
    for (int i = 0; i < 50; ++i) {
      capstan::fork_io([w = fds[1]] {
        capstan::sleep_for(std::chrono::microseconds(50));
        char c = 'x';
        EXPECT_EQ(write(w, &c, 1), 1);
      });
      capstan::wait_readable(fds[0]);
      char c;
      EXPECT_EQ(read(fds[0], &c, 1), 1);
    }
    after = capstan::detail::lock_revocations();
    close(fds[0]);
    close(fds[1]);
  });
  EXPECT_EQ(after, before);
}

// A timed take that the IO thread ends (the time-out) revokes that mvar;
// the take reports the time-out, and a later put and take still work.
TEST_P(BiasedLocks, ATimedTakeEndedByTheIoThreadKeepsWorking) {
  std::optional<int> timed_out = 0, later;
  run([&] {
    capstan::mvar<int> m;
    timed_out = m.take_for(std::chrono::milliseconds(2));
    m.put(7);
    later = m.take_for(std::chrono::seconds(5));
  });
  EXPECT_FALSE(timed_out.has_value());
  EXPECT_EQ(later, 7);
}

// A run that revokes many biased mvars (one per job handed to an OS
// thread) stops making new ones biased; the next run starts afresh.
TEST_P(BiasedLocks, ManyRevocationsMakeNewMvarsShared) {
  if (!bias_expected(caps())) GTEST_SKIP() << "locks are not biased in this run";
  bool late_biased = true, next_run_biased = false;
  std::uint64_t revoked = 0;
  run([&] {
    for (int i = 0; i < 5000; ++i) {
      capstan::mvar<int> job;
      std::thread([&] { EXPECT_TRUE(job.try_put(i)); }).join();
      EXPECT_EQ(job.take(), i);
    }
    capstan::mvar<int> late;
    late_biased = core_of(late).biased();
    revoked = capstan::statistics().lock_revocations;
  });
  run([&] {
    mvar_core c;
    next_run_biased = c.biased();
  });
  EXPECT_FALSE(late_biased);
  EXPECT_GE(revoked, 4000u);
  EXPECT_LT(revoked, 5000u);
  EXPECT_TRUE(next_run_biased);
}

}  // namespace
