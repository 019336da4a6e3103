// no_membarrier_test.cpp - a kernel (or emulator) without membarrier: the
// runtime starts anyway (rt.membarrier_ok false), takes the wait locks from
// the start (Note [Wait locks] in rts/schedule/raise.cpp), never steals
// (stealing needs the process-wide barrier, rts/schedule/steal.cpp), and
// still hands values across capabilities and kills blocked threads.
//
// membarrier is denied with a seccomp filter (it fails with ENOSYS, as on a
// kernel built without it) installed before the first run; the OS threads
// the runtime starts inherit it.  Where seccomp itself is unavailable (qemu-
// user refuses it) the tests skip.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/membarrier.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"
#include "runtime/runtime.hpp"

using namespace capstan;
using capstan::rts::rt;
using capstan_test::green_wait_until;

namespace {

#if defined(__x86_64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr std::uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
constexpr std::uint32_t kAuditArch = 0;  // no filter: the tests skip
#endif

// deny_membarrier installs (once per process) a filter making membarrier
// fail with ENOSYS; returns whether membarrier now fails so.
bool deny_membarrier() {
  static const bool denied = [] {
    if (kAuditArch == 0) return false;
    sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_membarrier, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return false;
    return syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) == -1 && errno == ENOSYS;
  }();
  return denied;
}

class NoMembarrier : public capstan_test::WithCaps {
 protected:
  void SetUp() override {
    if (!deny_membarrier()) GTEST_SKIP() << "cannot deny membarrier here (no seccomp)";
  }
};

// Values go round a ring of threads, one per capability and a few more, so
// most hand-offs cross capabilities: the locked waits lose none.
TEST_P(NoMembarrier, TheRuntimeRunsWithLockedWaitsAndNoStealing) {
  const unsigned n = caps() + 3;
  const int kRounds = 2000 / capstan_test::kScale;
  long sum = run([&] {
    EXPECT_FALSE(rt.membarrier_ok);
    EXPECT_TRUE(rt.waits_need_lock.load()) << "without membarrier the wait lock must always be taken";
    std::vector<mvar<long>> ring(n);
    mvar<long> out;
    for (unsigned i = 1; i < n; ++i) {
      fork_on(i % caps(), [&, i] {
        for (int r = 0; r < kRounds; ++r) ring[(i + 1) % n].put(ring[i].take() + 1);
      });
    }
    long v = 0;
    for (int r = 0; r < kRounds; ++r) {
      ring[1].put(v);
      v = ring[0].take();
    }
    return v;
  });
  EXPECT_EQ(sum, static_cast<long>(kRounds) * (n - 1));
  std::uint64_t stolen = 0;
  for (const auto& c : statistics().capabilities) stolen += c.threads_stolen;
  EXPECT_EQ(stolen, 0u) << "a steal ran without the barrier it needs";
}

// kill_thread turns the wait locks on without membarrier (enable_wait_locks
// has nothing to wait for): the blocked victims still get thread_killed.
TEST_P(NoMembarrier, KillingBlockedThreadsStillWorks) {
  run([&] {
    mvar<int> never;
    std::atomic<int> killed{0};
    std::vector<thread_id> victims;
    for (unsigned i = 0; i < 2 * caps(); ++i) {
      victims.push_back(fork_on(i % caps(), [&] {
        try {
          never.take();
        } catch (const thread_killed&) {
          killed.fetch_add(1);
          throw;
        }
      }));
    }
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == victims.size(); }));
    for (thread_id t : victims) kill_thread(t);
    ASSERT_TRUE(green_wait_until([&] { return killed.load() == static_cast<int>(victims.size()); }));
    EXPECT_EQ(never.waiting(), 0u);
    EXPECT_TRUE(never.try_put(1)) << "a killed waiter was left in the mvar's queue";
  });
}

CAPSTAN_INSTANTIATE_CAPS(NoMembarrier);

}  // namespace
