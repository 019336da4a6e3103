// overlap: at -N1, green thread A makes n blocking safe calls of 200 ms each
// (nanosleep inside safe_call) while green thread B computes in ~1 µs work
// units, passing capstan::yield_point() after each (a safe point at least
// every 10 µs) and marking the 1 ms time bucket it finished the unit in.
//
// return_latency_us: for each call, from a timestamp taken inside the call
//   right before it returns to the moment A runs again after safe_call
//   returns: how long the returning caller waited for its capability.
//   Median over the n calls.
// overlap_percent: time-bucket coverage.  Each call's window [start, end]
//   is cut into the 1 ms buckets that lie wholly inside it; a bucket counts
//   as overlapped if B finished at least one work unit in it.  Coverage
//   measures *whether* B ran throughout the call (a call that holds the
//   capability gives ~0 %, one stall of k ms costs k buckets), unaffected by
//   how fast the shared machine lets B run.
// work_percent: how fast B ran during the calls, as a share of its rate
//   when running alone (200 ms measured before A starts); noisy on a loaded
//   machine, shown for context.
// Check: B's bucket counts add up to the units it did, and every call slept.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include <capstan/foreign.hpp>

#include "bench.hpp"

namespace {

constexpr std::uint64_t kCallNs = 200'000'000;  // one blocking call
constexpr std::uint64_t kBucketNs = 1'000'000;  // coverage resolution

// work_unit: about 1 µs of arithmetic the compiler cannot drop.
std::uint64_t work_unit(std::uint64_t x) {
  for (int i = 0; i < 400; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));
  }
  return x;
}

// blocking_call sleeps for kCallNs in the OS and returns the time at which
// it is about to return.
std::uint64_t blocking_call() {
  timespec ts{0, static_cast<long>(kCallNs)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  return bench::now_ns();
}

}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 10);
  double latency_us = 0, overlap = 0, work = 0;
  bool ok = capstan::run(a.opts, [&] {
    long long n = a.n;
    std::uint64_t t0 = bench::now_ns();
    // Buckets for the baseline, the calls and some slack.
    std::vector<std::uint32_t> buckets(static_cast<std::size_t>((n + 2) * kCallNs / kBucketNs * 2));
    std::vector<std::uint64_t> starts(n), ends(n), latencies(n);
    std::atomic<bool> stop{false};
    capstan::mvar<int> go;
    capstan::mvar<long long> b_done, a_done;
    long long base_units = 0;
    std::uint64_t base_ns = 0;

    capstan::fork_io([&] {  // B
      long long units = 0;
      std::uint64_t x = 1;
      std::uint64_t b0 = bench::now_ns(), t = b0;
      for (; t - b0 < kCallNs; ++units) {  // alone: the baseline rate
        x = work_unit(x);
        capstan::yield_point();
        t = bench::now_ns();
        std::size_t i = (t - t0) / kBucketNs;
        if (i < buckets.size()) ++buckets[i];
      }
      base_units = units;
      base_ns = t - b0;
      go.put(1);
      while (!stop.load(std::memory_order_relaxed)) {
        x = work_unit(x);
        capstan::yield_point();
        std::size_t i = (bench::now_ns() - t0) / kBucketNs;
        if (i < buckets.size()) ++buckets[i];
        ++units;
      }
      b_done.put(units);
    });
    capstan::fork_io([&] {  // A
      go.take();
      for (long long k = 0; k < n; ++k) {
        starts[k] = bench::now_ns();
        ends[k] = capstan::safe_call(blocking_call);
        latencies[k] = bench::now_ns() - ends[k];
      }
      stop.store(true, std::memory_order_relaxed);
      a_done.put(0);
    });
    a_done.take();
    long long units = b_done.take();

    std::uint64_t covered = 0, total = 0, window_units = 0, window_ns = 0;
    bool slept = true;
    for (long long k = 0; k < n; ++k) {
      slept = slept && ends[k] - starts[k] >= kCallNs;
      std::size_t first = (starts[k] - t0 + kBucketNs - 1) / kBucketNs;
      std::size_t last = std::min<std::size_t>((ends[k] - t0) / kBucketNs, buckets.size());
      for (std::size_t i = first; i < last; ++i) {
        ++total;
        covered += buckets[i] != 0;
        window_units += buckets[i];
      }
      window_ns += (last - first) * kBucketNs;
    }
    long long counted = 0;
    for (auto c : buckets) counted += c;
    std::sort(latencies.begin(), latencies.end());
    latency_us = static_cast<double>(latencies[latencies.size() / 2]) / 1e3;
    overlap = total ? 100.0 * static_cast<double>(covered) / static_cast<double>(total) : 0;
    double base_rate = static_cast<double>(base_units) / static_cast<double>(base_ns);
    double window_rate = window_ns ? static_cast<double>(window_units) / static_cast<double>(window_ns) : 0;
    work = 100.0 * window_rate / base_rate;
    return slept && counted == units;
  });
  return bench::report("overlap", a.opts.capabilities, a.n,
                       fmt::format("return_latency_us={:.1f} overlap_percent={:.2f} work_percent={:.1f}",
                                   latency_us, overlap, work),
                       ok);
}
