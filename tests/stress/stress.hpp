// stress.hpp - helpers for randomised concurrency stress tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "capstan_test.hpp"

namespace stress {

// Watchdog aborts the process with a message if a test hangs: a lost
// wake-up shows up as a hang, and a clear abort beats a CI timeout.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, const char* what) : what_(what) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
        std::fprintf(stderr, "watchdog: '%s' hung for %llds (lost wake-up?)\n", what_,
                     static_cast<long long>(limit.count()));
        // What every green thread waits on, for the post-mortem (a hang
        // outside a run has nothing to dump: usage_error, ignored).
        try {
          capstan::dump_threads(stderr);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "watchdog: no thread dump: %s\n", e.what());
        }
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  const char* what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// A per-green-thread random source (seeded from the test's seed).
inline std::uint64_t seed() {
  static std::uint64_t s = [] {
    const char* env = std::getenv("CAPSTAN_STRESS_SEED");
    std::uint64_t v = env ? std::strtoull(env, nullptr, 10)
                          : static_cast<std::uint64_t>(
                                std::chrono::steady_clock::now().time_since_epoch().count());
    std::fprintf(stderr, "stress seed %llu (set CAPSTAN_STRESS_SEED to replay)\n",
                 static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

// maybe_yield yields with probability 1/k, to shuffle interleavings.
inline void maybe_yield(std::mt19937_64& rng, unsigned k = 4) {
  if (rng() % k == 0) capstan::yield();
}

// Scale: sanitizer builds run 10x fewer iterations.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr long kScale = 10;
#else
inline constexpr long kScale = 1;
#endif

}  // namespace stress
