// overflow_handler_test.cpp - a green thread that runs off its stack dies
// with a message naming it (the guard page plus the SIGSEGV handler).
#include <gtest/gtest.h>

#include "capstan_test.hpp"

namespace {

volatile int limit = 1 << 30;  // "bounded", as far as the compiler knows

__attribute__((noinline)) int recurse(volatile char* prev, int depth) {
  volatile char frame[512];
  frame[0] = static_cast<char>(depth);
  frame[511] = prev ? prev[0] : 0;
  if (depth > limit) return 0;
  return recurse(frame, depth + 1) + frame[7];  // not a tail call
}

TEST(OverflowHandlerDeathTest, StackOverflowNamesTheThread) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers report SIGSEGV themselves";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        capstan::options o = capstan_test::opts(1);
        o.stack_size = 64 * 1024;
        capstan::run(o, [] {
          capstan::mvar<int> done;
          auto t = capstan::fork_io([&] { done.put(recurse(nullptr, 0)); });
          capstan::label_thread(t, "deep");
          done.take();
        });
      },
      "stack overflow in thread [0-9]+ \\(deep\\): its stack of 65536 bytes is exhausted");
}

// Main unlabelled is "main" here too, as in thread dumps and the hog
// warning (it read "unlabelled").
TEST(OverflowHandlerDeathTest, StackOverflowInMainSaysMain) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers report SIGSEGV themselves";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        capstan::options o = capstan_test::opts(1);
        o.stack_size = 64 * 1024;
        capstan::run(o, [] { return recurse(nullptr, 0); });
      },
      "stack overflow in thread [0-9]+ \\(main\\): its stack of 65536 bytes is exhausted");
}

}  // namespace
