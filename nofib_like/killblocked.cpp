// killblocked: kill n threads blocked on mvars, each `frames` frames deep
// with a destructor in every frame, so each kill unwinds its stack.
// ns_per_thread = time from the first kill until every destructor has run,
// / n.  floor_ns = a bare throw + catch of thread_killed through the same
// frames on a green thread, in the same run; ratio = ns_per_thread / floor_ns.
#include <memory>
#include <vector>

#include "unwind.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 100'000);
  const int frames = static_cast<int>(a.positive(2, 5, "frames"));
  double ns = 0, floor = 0;
  bool ok = capstan::run(a.opts, [&] {
    const long long n = a.n;
    auto ms = std::make_unique<capstan::mvar<int>[]>(static_cast<std::size_t>(n));
    std::atomic<long long> dtors{0};
    std::vector<capstan::thread_id> ids;
    ids.reserve(static_cast<std::size_t>(n));
    for (long long i = 0; i < n; ++i) {
      ids.push_back(capstan::fork_io([&, m = &ms[static_cast<std::size_t>(i)]] {
        auto bottom = [m] { m->take(); };
        bench::descend(frames, dtors, bottom);
      }));
    }
    for (auto id : ids)
      while (capstan::state_of(id) != capstan::thread_state::blocked) capstan::yield();
    const long long want = n * frames;
    std::uint64_t t0 = bench::now_ns();
    for (auto id : ids) capstan::kill_thread(id);
    while (dtors.load(std::memory_order_relaxed) < want) capstan::yield();
    ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(n);
    floor = bench::floor_ns(frames, n);
    return dtors.load() == want;
  });
  auto s = capstan::statistics();
  ok = ok && s.threads_killed == static_cast<std::uint64_t>(a.n);
  return bench::report(
      "killblocked", a.opts.capabilities, a.n,
      fmt::format("ns_per_thread={:.2f} floor_ns={:.2f} ratio={:.2f} frames={}", ns, floor,
                  ns / floor, frames),
      ok);
}
