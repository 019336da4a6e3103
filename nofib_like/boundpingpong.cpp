// boundpingpong: MVar ping-pong between run()'s bound main green thread and
// an unbound green thread (fork_io).  Like pingpong, but main is one side:
// in GHC every hand-off to or from a bound thread is an OS thread switch.
// Metric: ns_per_handoff = elapsed / (2n).
// Bound-thread semantics: main records the OS thread it runs on after every
// hand-off (pthread_self, a few ns, through a volatile pointer so that the
// compiler cannot assume it constant) and compares gettid() with the thread
// that called run(), before and after the loop; os_thread_changes counts
// the mismatches and must be 0.  Check: also the sum of the values echoed.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <capstan/foreign.hpp>

#include "bench.hpp"

namespace {
pthread_t (*volatile os_self)() = pthread_self;
long os_tid() { return syscall(SYS_gettid); }
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  double ns = 0;
  long long changes = 0;
  const long run_tid = os_tid();
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    capstan::mvar<long long> ping, pong, done;
    changes += os_tid() != run_tid;
    const pthread_t me = os_self();
    bool bound = capstan::is_bound();
    std::uint64_t t0 = bench::now_ns();
    capstan::fork_io([&] {
      long long sum = 0;
      for (long long i = 0; i < n; ++i) {
        long long v = ping.take();
        sum += v;
        pong.put(v);
      }
      done.put(sum);
    });
    for (long long i = 0; i < n; ++i) {
      ping.put(i);
      pong.take();
      changes += !pthread_equal(os_self(), me);
    }
    long long s = done.take();
    ns = static_cast<double>(bench::now_ns() - t0) / (2.0 * static_cast<double>(n));
    changes += os_tid() != run_tid;
    return bound && s == n * (n - 1) / 2;
  });
  return bench::report("boundpingpong", a.opts.capabilities, a.n,
                       fmt::format("ns_per_handoff={:.2f} os_thread_changes={}", ns, changes),
                       ok && changes == 0);
}
