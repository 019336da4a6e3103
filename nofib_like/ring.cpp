// ring: 503 green threads pass a token around a ring of MVars n times
// (the thread-ring / nofib threads003 shape).  The thread that receives
// token 0 reports its 1-based position.
#include <memory>
#include <vector>

#include "bench.hpp"

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 10'000'000);
  constexpr int kRing = 503;
  double ns = 0;
  long long winner = 0;
  capstan::run(a.opts, [&] {
    std::vector<std::unique_ptr<capstan::mvar<long long>>> box;
    for (int i = 0; i < kRing; ++i) box.push_back(std::make_unique<capstan::mvar<long long>>());
    capstan::mvar<long long> done;
    for (int i = 0; i < kRing; ++i) {
      capstan::fork_io([&, i] {
        for (;;) {
          long long token = box[i]->take();
          if (token == 0) {
            done.put(i + 1);
            return;
          }
          box[(i + 1) % kRing]->put(token - 1);
        }
      });
    }
    std::uint64_t t0 = bench::now_ns();
    box[0]->put(a.n);
    winner = done.take();
    ns = static_cast<double>(bench::now_ns() - t0) / static_cast<double>(a.n);
    // The other 502 threads stay blocked: shutdown reclaims them.
  });
  bool ok = winner == a.n % kRing + 1;
  return bench::report("ring", a.opts.capabilities, a.n, fmt::format("ns_per_hop={:.2f}", ns), ok);
}
