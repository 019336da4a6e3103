// hog_warning_test.cpp - +RTS --warn-hog: a thread that keeps its
// capability without a safe point while others wait is named on stderr,
// once; a thread that reaches safe points, or keeps a capability nobody
// waits for, is not.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "capstan_test.hpp"

namespace {

using capstan_test::RuntimeTest;
using capstan_test::StderrFile;

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// spin_without_safe_point keeps the OS thread busy for `d`, making no
// runtime call.
void spin_without_safe_point(std::chrono::milliseconds d) {
  auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

class HogWarning : public RuntimeTest {};

TEST_F(HogWarning, AHogWithWaitersIsNamedOnceWithTheAdvice) {
  auto o = capstan_test::opts(1);
  o.warn_hog = std::chrono::milliseconds(50);
  StderrFile err;
  capstan::thread_id hog;
  run(o, [&] {
    capstan::mvar<int> done;
    hog = capstan::fork_io([&] {
      spin_without_safe_point(std::chrono::milliseconds(250));
      capstan::yield();
      spin_without_safe_point(std::chrono::milliseconds(250));  // a second stretch: not named again
      done.put(1);
    });
    capstan::label_thread(hog, "parser");
    capstan::fork_io([&] { done.put(2); });  // waits behind the hog
    done.take();
    done.take();
  });
  std::string out = err.restore();
  std::string name = "capstan: thread " + std::to_string(hog.value()) + " \"parser\" has held capability 0 for ";
  EXPECT_EQ(count(out, name), 1u) << out;
  EXPECT_NE(out.find("call capstan::yield_point() in its long loops"), std::string::npos) << out;
  EXPECT_EQ(count(out, "has held capability"), 1u) << out;
}

TEST_F(HogWarning, SafePointsOrNobodyWaitingMeansNoWarning) {
  auto o = capstan_test::opts(1, std::chrono::microseconds(5000));
  o.warn_hog = std::chrono::milliseconds(50);
  StderrFile err;
  run(o, [&] {
    capstan::mvar<int> done;
    // Long, but with safe points: the timeslice takes the capability back.
    capstan::fork_io([&] {
      auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
      while (std::chrono::steady_clock::now() < end) capstan::yield_point();
      done.put(1);
    });
    capstan::fork_io([&] { done.put(2); });
    done.take();
    done.take();
    // Long without safe points, but alone: nobody waits.
    spin_without_safe_point(std::chrono::milliseconds(200));
  });
  std::string out = err.restore();
  EXPECT_EQ(count(out, "has held capability"), 0u) << out;
}

TEST_F(HogWarning, ZeroSilencesIt) {
  auto o = capstan_test::opts(1);
  o.warn_hog = std::chrono::milliseconds(0);
  StderrFile err;
  run(o, [&] {
    capstan::mvar<int> done;
    capstan::fork_io([&] { done.put(1); });
    spin_without_safe_point(std::chrono::milliseconds(200));
    done.take();
  });
  EXPECT_EQ(count(err.restore(), "has held capability"), 0u);
}

}  // namespace
