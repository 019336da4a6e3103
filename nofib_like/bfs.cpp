// bfs: level-synchronous BFS from node 0 of a pseudo-random graph, n nodes of
// out-degree d (fixed-seed 64-bit LCG, as in the Haskell twin).  Each level's
// frontier is cut into chunks of >= 4096 nodes (at most 64), one spark each
// collecting its nodes' unvisited neighbours; the maker forces the chunks in
// order and merges each one's candidates at once, deduplicated by dist
// (relaxed atomics: a later chunk may skip a node set earlier in this level,
// which the merge would reject anyway: the result does not depend on timing).
// seq_ms: a plain queue BFS, the best of 3, outside the runtime; ratio =
// seq_ms / ms (the speed-up over it).  Check: equal distance arrays.
#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <vector>

#include "bench.hpp"

namespace {
using node = std::uint32_t;
constexpr std::size_t kMinChunk = 4096, kMaxChunks = 64;  // same in the Haskell twin
constexpr auto relaxed = std::memory_order_relaxed;

// dist entries are shared with running sparks: relaxed atomics (plain moves).
std::atomic_ref<int> at(std::vector<int>& dist, node v) { return std::atomic_ref<int>(dist[v]); }

std::vector<int> par_bfs(const std::vector<node>& adj, std::size_t d) {
  std::vector<int> dist(adj.size() / d, -1);
  std::vector<std::vector<node>> cand(kMaxChunks);
  std::vector<node> frontier{0}, next;
  dist[0] = 0;
  for (int level = 1; !frontier.empty(); ++level) {
    std::size_t f = frontier.size(), chunk = std::max(kMinChunk, (f + kMaxChunks - 1) / kMaxChunks);
    std::vector<std::unique_ptr<capstan::spark<void>>> sparks;
    for (std::size_t c = 0, lo = 0; lo < f; ++c, lo += chunk)
      // new T(prvalue) initialises in place: sparks need not be movable.
      sparks.emplace_back(new capstan::spark<void>(capstan::par([&, c, lo] {
        cand[c].clear();
        for (std::size_t i = lo; i < std::min(f, lo + chunk); ++i)
          for (const node* e = &adj[frontier[i] * d], *end = e + d; e != end; ++e)
            if (at(dist, *e).load(relaxed) < 0) cand[c].push_back(*e);
      })));
    next.clear();
    for (std::size_t c = 0; c < sparks.size(); ++c) {
      sparks[c]->get();  // merge chunk c while later chunks may still run
      for (node v : cand[c])
        if (at(dist, v).load(relaxed) < 0) at(dist, v).store(level, relaxed), next.push_back(v);
    }
    frontier.swap(next);
  }
  return dist;
}

std::vector<int> seq_bfs(const std::vector<node>& adj, std::size_t d) {
  std::vector<int> dist(adj.size() / d, -1);
  std::vector<node> queue{0};
  dist[0] = 0;
  for (std::size_t q = 0; q < queue.size(); ++q)
    for (std::size_t k = 0, u = queue[q]; k < d; ++k)
      if (node v = adj[u * d + k]; dist[v] < 0) dist[v] = dist[u] + 1, queue.push_back(v);
  return dist;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 1'000'000);
  long long d = argv[1] && argv[2] ? std::atoll(argv[2]) : 16;  // argv is null-terminated
  if (d <= 0 || a.n > (1LL << 31)) {
    std::fprintf(stderr, "usage: bfs [n<=2^31] [degree>0]\n");
    return 2;
  }
  auto n = static_cast<std::size_t>(a.n), deg = static_cast<std::size_t>(d);
  std::vector<node> adj(n * deg);
  std::uint64_t x = 42;  // 64-bit LCG, (top 32 bits) mod n (same as the Haskell twin)
  for (auto& v : adj) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<node>((x >> 32) % n);
  }
  double ms = 0;
  std::vector<int> got = capstan::run(a.opts, [&] {
    std::uint64_t t0 = bench::now_ns();
    std::vector<int> r = par_bfs(adj, deg);
    ms = static_cast<double>(bench::now_ns() - t0) / 1e6;
    return r;
  });
  auto sp = capstan::statistics().sparks;
  double seq_ms = std::numeric_limits<double>::infinity();
  bool ok = true;
  for (int rep = 0; rep < 3; ++rep) {
    std::uint64_t t0 = bench::now_ns();
    std::vector<int> want = seq_bfs(adj, deg);
    seq_ms = std::min(seq_ms, static_cast<double>(bench::now_ns() - t0) / 1e6);
    ok = ok && got == want;
  }
  return bench::report(
      "bfs", a.opts.capabilities, a.n,
      fmt::format("ms={:.3f} seq_ms={:.3f} ratio={:.3f} sparks={}/{}/{}/{}/{}/{}", ms, seq_ms,
                  seq_ms / ms, sp.created, sp.converted, sp.overflowed, sp.dud, sp.gcd,
                  sp.fizzled),
      ok);
}
