// condvar: ping-pong through a capstan::mutex + condition_variable pair
// between two green threads (ns_per_handoff), against, in the same run,
// the mvar pingpong (mvar_ns_per_handoff) and a std::mutex +
// std::condition_variable ping-pong between two OS threads
// (std_ns_per_handoff, on n/10 rounds: it is slow).
// Check: both sides saw every turn.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "bench.hpp"

namespace {

template <class M, class CV, class Spawn, class Join>
double turns(long long n, Spawn spawn, Join join, long long& seen) {
  M m;
  CV cv;
  long long turn = 0;  // guarded by m: even = A's turn, odd = B's
  auto side = [&](long long parity) {
    for (long long i = 0; i < n; ++i) {
      std::unique_lock<M> lk(m);
      cv.wait(lk, [&] { return turn % 2 == parity; });
      ++turn;
      lk.unlock();
      cv.notify_one();
    }
  };
  std::uint64_t t0 = bench::now_ns();
  auto h = spawn([&] { side(1); });
  side(0);
  join(h);
  seen = turn;
  return static_cast<double>(bench::now_ns() - t0) / (2.0 * static_cast<double>(n));
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  long long n = a.n, seen = 0, mv_sum = 0;
  double cv_ns = 0, mv_ns = 0, std_ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    cv_ns = turns<capstan::mutex, capstan::condition_variable>(
        n,
        [](auto f) {
          auto done = std::make_shared<capstan::mvar<int>>();
          capstan::fork_io([f, done] {
            f();
            done->put(1);
          });
          return done;
        },
        [](auto& done) { done->take(); }, seen);
    capstan::mvar<long long> ping, pong, fin;
    std::uint64_t t0 = bench::now_ns();
    capstan::fork_io([&] {
      long long s = 0;
      for (long long i = 0; i < n; ++i) {
        long long v = ping.take();
        s += v;
        pong.put(v);
      }
      fin.put(s);
    });
    for (long long i = 0; i < n; ++i) {
      ping.put(i);
      pong.take();
    }
    mv_sum = fin.take();
    mv_ns = static_cast<double>(bench::now_ns() - t0) / (2.0 * static_cast<double>(n));
    return true;
  });
  long long std_seen = 0, std_n = n / 10 > 0 ? n / 10 : 1;
  std_ns = turns<std::mutex, std::condition_variable>(
      std_n, [](auto f) { return std::thread(f); }, [](std::thread& t) { t.join(); }, std_seen);
  ok = ok && seen == 2 * n && std_seen == 2 * std_n && mv_sum == n * (n - 1) / 2;
  return bench::report("condvar", a.opts.capabilities, a.n,
                       fmt::format("ns_per_handoff={:.2f} mvar_ns_per_handoff={:.2f} std_ns_per_handoff={:.2f}",
                                   cv_ns, mv_ns, std_ns),
                       ok);
}
