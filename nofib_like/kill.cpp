// kill: GHC's threads006 shape.  Fork n threads with asynchronous
// exceptions masked, then kill each from another thread: kill_thread waits
// until the masked target finishes (its body runs, the message is never
// raised).  ns_per_thread = (fork + kill) / n; baseline fork_ns = the same
// n masked forks, waited for without kills, in the same run.
#include <vector>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  double ns = 0, fork_ns = 0;
  bool ok = capstan::run(a.opts, [&] {
    const long long n = a.n;
    std::atomic<long long> ran{0};
    auto body = [&ran] { ran.fetch_add(1, std::memory_order_relaxed); };
    // Baseline: fork n masked threads and wait until each has run.
    std::uint64_t t0 = bench::now_ns();
    capstan::mask([&] {
      for (long long i = 0; i < n; ++i) capstan::fork_io(body);
    });
    while (ran.load(std::memory_order_relaxed) < n) capstan::yield();
    fork_ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    // Measured: the same forks, each thread killed from a killer thread.
    ran = 0;
    std::vector<capstan::thread_id> ids;
    ids.reserve(static_cast<std::size_t>(n));
    capstan::mvar<int> done;
    auto before = capstan::statistics();
    t0 = bench::now_ns();
    capstan::mask([&] {
      for (long long i = 0; i < n; ++i) ids.push_back(capstan::fork_io(body));
    });
    capstan::fork_io([&] {
      for (auto id : ids) capstan::kill_thread(id);
      done.put(1);
    });
    done.take();
    ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    auto after = capstan::statistics();
    // Masked bodies that never block cannot be interrupted: all ran, none died.
    return ran.load() == n && after.threads_died == before.threads_died;
  });
  return bench::report("kill", a.opts.capabilities, a.n,
                       fmt::format("ns_per_thread={:.2f} fork_ns={:.2f}", ns, fork_ns), ok);
}
