// mutex: capstan::mutex, uncontended and contended, against baselines run
// in the same program.
//   uncontended: n lock+unlock pairs on one thread - capstan::mutex in a
//     green thread vs std::mutex (ns_per_lock vs std_ns_per_lock).
//   contended: 4 green threads each doing n/4 lock; ++shared; unlock on one
//     mutex (ns_per_op) vs 4 OS threads on a std::mutex (os_ns_per_op), and
//     vs 4 Boost.Fiber fibers on a boost::fibers::mutex on one OS thread
//     (fiber_ns_per_op; "na" when built without Boost.Fiber).
// Check: every shared counter ends at its expected value.
#include <mutex>
#include <thread>
#include <vector>

#if __has_include(<boost/fiber/all.hpp>) && defined(CAPSTAN_BENCH_BOOST_FIBER)
#include <boost/fiber/all.hpp>
#define HAVE_FIBER 1
#else
#define HAVE_FIBER 0
#endif

#include "bench.hpp"

namespace {

constexpr int kThreads = 4;

template <class M>
double uncontended(M& m, long long n, long long& counter) {
  std::uint64_t t0 = bench::now_ns();
  for (long long i = 0; i < n; ++i) {
    m.lock();
    ++counter;
    m.unlock();
  }
  return static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
}

double os_contended(long long n, long long& counter) {
  std::mutex m;
  std::vector<std::thread> ts;
  std::uint64_t t0 = bench::now_ns();
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (long long i = 0; i < n / kThreads; ++i) {
        std::lock_guard<std::mutex> g(m);
        ++counter;
      }
    });
  for (auto& t : ts) t.join();
  return static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
}

#if HAVE_FIBER
double fiber_contended(long long n, long long& counter) {
  boost::fibers::mutex m;
  std::vector<boost::fibers::fiber> fs;
  std::uint64_t t0 = bench::now_ns();
  for (int t = 0; t < kThreads; ++t)
    fs.emplace_back([&] {
      for (long long i = 0; i < n / kThreads; ++i) {
        std::lock_guard<boost::fibers::mutex> g(m);
        ++counter;
        if ((i & 15) == 0) boost::this_fiber::yield();  // contention: others queue
      }
    });
  for (auto& f : fs) f.join();
  return static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 4'000'000);
  const long long n = a.n / kThreads * kThreads;
  double cap_unc = 0, std_unc = 0, cap_con = 0, os_con = 0, fib_con = -1;
  long long c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
  bool ok = capstan::run(a.opts, [&] {
    capstan::mutex cm;
    std::mutex sm;
    uncontended(cm, n / 4, c1);  // warm-up
    uncontended(sm, n / 4, c1);
    c1 = 0;
    cap_unc = uncontended(cm, n, c1);
    std_unc = uncontended(sm, n, c2);
    capstan::mutex m;
    capstan::wait_group wg(kThreads);
    std::uint64_t t0 = bench::now_ns();
    for (int t = 0; t < kThreads; ++t)
      capstan::fork_io([&] {
        for (long long i = 0; i < n / kThreads; ++i) {
          std::lock_guard<capstan::mutex> g(m);
          ++c3;
          if ((i & 15) == 0) capstan::yield();  // contention: others queue
        }
        wg.done();
      });
    wg.wait();
    cap_con = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    return true;
  });
  os_con = os_contended(n, c4);
#if HAVE_FIBER
  fib_con = fiber_contended(n, c5);
#else
  c5 = n;
#endif
  ok = ok && c1 == n && c2 == n && c3 == n && c4 == n && c5 == n;
  std::string fib = fib_con < 0 ? std::string("na") : fmt::format("{:.2f}", fib_con);
  return bench::report(
      "mutex", a.opts.capabilities, a.n,
      fmt::format("ns_per_op={:.2f} ns_per_lock={:.2f} std_ns_per_lock={:.2f} os_ns_per_op={:.2f} "
                  "fiber_ns_per_op={}",
                  cap_con, cap_unc, std_unc, os_con, fib),
      ok);
}
