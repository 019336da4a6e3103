// capstan_test.hpp - shared fixtures: run a test body inside the runtime at
// several capability counts, and check after every run that it shut down
// cleanly.
#pragma once

#include <gtest/gtest.h>

#include <capstan/capstan.hpp>

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace capstan_test {

// Sanitizer builds run the big loops at a tenth of their size.
// kSanitized: an ASan or TSan build, where timing-based properties (a
// spin that outlasts a short call, say) do not hold.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int kScale = 10;
inline constexpr bool kSanitized = true;
#else
inline constexpr int kScale = 1;
inline constexpr bool kSanitized = false;
#endif

inline capstan::options opts(unsigned caps, std::chrono::microseconds slice = std::chrono::microseconds(20000)) {
  capstan::options o;
  o.capabilities = caps;
  o.timeslice = slice;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  o.stack_size = 1024 * 1024;  // sanitizers inflate frames
#endif
  return o;
}

// The failure guard of a wait on a condition: generous, so that it only
// turns a hang into a failure; never a timing claim.
inline constexpr std::chrono::seconds kWaitGuard{30};

// wait_until polls pred, calling pause() between polls, until it holds;
// false if kWaitGuard passed first.  os_wait_until pauses with
// std::this_thread::yield (for an OS thread: a plain one, or inside
// safe_call); green_wait_until with capstan::yield (for a green thread: the
// others on its capability run meanwhile).
template <class Pred, class Pause>
bool wait_until(Pred pred, Pause pause) {
  auto end = std::chrono::steady_clock::now() + kWaitGuard;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    pause();
  }
  return true;
}
template <class Pred>
bool os_wait_until(Pred pred) {
  return wait_until(pred, [] { std::this_thread::yield(); });
}
template <class Pred>
bool green_wait_until(Pred pred) {
  return wait_until(pred, [] { capstan::yield(); });
}

// StderrFile: fd 2 redirected to an unlinked temporary file while it lives
// (for what the runtime prints on stderr: warnings, dumps).  contents()
// reads what was written so far; restore() puts fd 2 back and returns it.
class StderrFile {
 public:
  StderrFile() {
    std::fflush(stderr);
    char path[] = "/tmp/capstan-stderr-XXXXXX";
    fd_ = ::mkstemp(path);
    ::unlink(path);
    saved_ = ::dup(2);
    ::dup2(fd_, 2);
  }
  StderrFile(const StderrFile&) = delete;
  StderrFile& operator=(const StderrFile&) = delete;
  ~StderrFile() {
    restore();
    ::close(fd_);
  }
  std::string contents() const {
    std::string s;
    char buf[4096];
    for (off_t off = 0;;) {
      ssize_t n = ::pread(fd_, buf, sizeof buf, off);
      if (n <= 0) break;
      s.append(buf, static_cast<std::size_t>(n));
      off += n;
    }
    return s;
  }
  std::string restore() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);
      ::close(saved_);
      saved_ = -1;
    }
    return contents();
  }

 private:
  int fd_ = -1, saved_ = -1;
};

// CleanTeardown: the run() of the fixtures below.  After every run it
// checks that the runtime ended cleanly (Note [Shutdown] in
// rts/shutdown/shutdown.cpp): every thread finished, normally or killed and unwound
// at shutdown; none is still live, none was abandoned, and every OS thread
// the runtime made has exited.  It checks after a run that ended with main's
// exception too, but not after run() refused to start (usage_error).
class CleanTeardown {
 protected:
  template <class F>
  decltype(auto) run(const capstan::options& o, F&& f) {
    struct Check {
      const CleanTeardown* self;
      ~Check() {
        if (self) self->check_teardown();
      }
    } check{this};
    try {
      return capstan::run(o, std::forward<F>(f));
    } catch (const capstan::usage_error&) {
      check.self = nullptr;  // refused before starting: there is nothing to check
      throw;
    }
  }

  // For a test that abandons threads on purpose (one that swallows
  // thread_killed): exactly n threads are abandoned, and so still live,
  // after each following run.
  void expect_abandoned(std::uint64_t n) { expected_abandoned_ = n; }

 private:
  void check_teardown() const {
    capstan::runtime_statistics s = capstan::statistics();
    EXPECT_EQ(s.threads_abandoned, expected_abandoned_)
        << "threads abandoned at shutdown (alive after the grace period)";
    EXPECT_EQ(s.live_threads, expected_abandoned_)
        << "threads neither finished nor killed when run() returned (created "
        << s.threads_created << ", finished " << s.threads_finished << ")";
    EXPECT_EQ(s.os_threads, 0u) << "runtime-made OS threads still running after run()";
  }

  std::uint64_t expected_abandoned_ = 0;
};

// WithCaps: a test parameterised over the number of capabilities; run(f)
// runs f at that count, run(options, f) with options of the test's own.
class WithCaps : public ::testing::TestWithParam<unsigned>, protected CleanTeardown {
 protected:
  unsigned caps() const { return GetParam(); }
  using CleanTeardown::run;
  template <class F>
  decltype(auto) run(F&& f) {
    return run(opts(caps()), std::forward<F>(f));
  }
};

// RuntimeTest: a test that runs the runtime with options of its own
// (run(options, f)), with the same check.
class RuntimeTest : public ::testing::Test, protected CleanTeardown {};

inline std::string caps_name(const ::testing::TestParamInfo<unsigned>& info) {
  return "N" + std::to_string(info.param);
}

// busy_work keeps the CPU busy for about `n` microseconds' worth of
// arithmetic, making no runtime call; returns the sum (so it is kept).
inline long busy_work(long n) {
  volatile long x = 0;
  for (long i = 0; i < n * 300; ++i) x = x + i;
  return x;
}

// CpuPin pins the calling thread - the one that will call run() - to `k`
// CPUs of its affinity mask (the one it is on first) for its lifetime:
// the runtime reads its CPU count from that mask when it starts, and the
// threads it starts inherit it (Note [Spinning only on a free CPU]).  ok() is false
// if the mask has fewer than k CPUs or the call failed.
class CpuPin {
 public:
  explicit CpuPin(int k) {
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0 || CPU_COUNT(&saved_) < k) return;
    cpu_set_t want;
    CPU_ZERO(&want);
    CPU_SET(sched_getcpu(), &want);
    for (int c = 0; c < CPU_SETSIZE && CPU_COUNT(&want) < k; ++c)
      if (CPU_ISSET(c, &saved_)) CPU_SET(c, &want);
    ok_ = sched_setaffinity(0, sizeof want, &want) == 0;
  }
  ~CpuPin() {
    if (ok_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  CpuPin(const CpuPin&) = delete;
  CpuPin& operator=(const CpuPin&) = delete;
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

// dump_to_string runs capstan::dump_threads into a string (a memory
// stream), for tests that read the dump.
inline std::string dump_to_string() {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  capstan::dump_threads(f);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

}  // namespace capstan_test

#define CAPSTAN_INSTANTIATE_CAPS(Suite) \
  INSTANTIATE_TEST_SUITE_P(Caps, Suite, ::testing::Values(1u, 2u, 4u), capstan_test::caps_name)
