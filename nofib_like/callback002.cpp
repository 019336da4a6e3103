// callback002: the latency of one in-call from a foreign OS thread, against
// an OS-level hand-off measured the same way in the same run.
//
// From inside a safe_call, the main green thread starts one std::thread F:
//   call_in:  F does x = capstan::call_in([x] { return x + 1; }) n times;
//             callin_ns = elapsed / n (one round trip each).
//   condvar:  F and a second std::thread E ping-pong through a mutex and two
//             condition variables: F posts x, E answers x + 1, n times;
//             condvar_ns = elapsed / n (one round trip each).
// Metric: ratio = callin_ns / condvar_ns (goal <= 1.5).
// Check: both chains end at x == n.
#include <condition_variable>
#include <mutex>
#include <thread>

#include <capstan/foreign.hpp>

#include "bench.hpp"

namespace {

// condvar_round_trips: n request/answer round trips between the calling
// thread and an echo thread; returns the final value (n) and the elapsed ns.
std::pair<long long, std::uint64_t> condvar_round_trips(long long n) {
  std::mutex m;
  std::condition_variable to_echo, to_caller;
  long long value = 0;
  bool request = false, answer = false, quit = false;
  std::thread echo([&] {
    std::unique_lock lk(m);
    for (;;) {
      to_echo.wait(lk, [&] { return request || quit; });
      if (quit) return;
      request = false;
      value += 1;
      answer = true;
      to_caller.notify_one();
    }
  });
  long long x = 0;
  std::uint64_t t0 = bench::now_ns();
  for (long long i = 0; i < n; ++i) {
    std::unique_lock lk(m);
    value = x;
    request = true;
    to_echo.notify_one();
    to_caller.wait(lk, [&] { return answer; });
    answer = false;
    x = value;
  }
  std::uint64_t elapsed = bench::now_ns() - t0;
  {
    std::lock_guard lk(m);
    quit = true;
  }
  to_echo.notify_one();
  echo.join();
  return {x, elapsed};
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 100'000);
  double callin_ns = 0, condvar_ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    long long x_in = 0, x_cv = 0;
    std::uint64_t in_elapsed = 0, cv_elapsed = 0;
    capstan::safe_call([&] {
      std::thread foreign([&] {
        for (long long i = 0; i < n / 10 + 1; ++i) capstan::call_in([] { return 0; });  // warm up
        long long x = 0;
        std::uint64_t t0 = bench::now_ns();
        for (long long i = 0; i < n; ++i) x = capstan::call_in([x] { return x + 1; });
        in_elapsed = bench::now_ns() - t0;
        x_in = x;
        condvar_round_trips(n / 10 + 1);  // warm up
        std::tie(x_cv, cv_elapsed) = condvar_round_trips(n);
      });
      foreign.join();
    });
    callin_ns = static_cast<double>(in_elapsed) / static_cast<double>(n);
    condvar_ns = static_cast<double>(cv_elapsed) / static_cast<double>(n);
    return x_in == n && x_cv == n;
  });
  return bench::report("callback002", a.opts.capabilities, a.n,
                       fmt::format("ratio={:.3f} callin_ns={:.1f} condvar_ns={:.1f}",
                                   callin_ns / condvar_ns, callin_ns, condvar_ns),
                       ok);
}
