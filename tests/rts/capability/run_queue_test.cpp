// run_queue_test.cpp - the owner-private run-queue deque.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

#include "capability/run_queue.hpp"

namespace {

using capstan::rts::RunQueue;
using capstan::rts::Thread;

TEST(RunQueue, PushBackPopsInOrderPushFrontJumpsTheQueue) {
  std::vector<Thread> t(4);
  RunQueue q;
  EXPECT_TRUE(q.empty());
  q.push_back(&t[0]);
  q.push_back(&t[1]);
  q.push_front(&t[2]);
  q.push_back(&t[3]);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.pop_front(), &t[2]);
  EXPECT_EQ(q.pop_front(), &t[0]);
  EXPECT_EQ(q.pop_front(), &t[1]);
  EXPECT_EQ(q.pop_front(), &t[3]);
  EXPECT_EQ(q.pop_front(), nullptr);
  EXPECT_TRUE(q.empty());
}

TEST(RunQueue, MatchesAReferenceDequeUnderRandomOperations) {
  std::vector<Thread> t(1000);
  RunQueue q;
  std::deque<Thread*> ref;
  std::mt19937 rng(42);
  std::size_t next = 0;
  for (int i = 0; i < 100000; ++i) {
    int op = static_cast<int>(rng() % 3);
    if (op == 0 && next < t.size()) {
      q.push_back(&t[next]);
      ref.push_back(&t[next++]);
    } else if (op == 1 && next < t.size()) {
      q.push_front(&t[next]);
      ref.push_front(&t[next++]);
    } else {
      Thread* got = q.pop_front();
      Thread* want = ref.empty() ? nullptr : ref.front();
      if (!ref.empty()) ref.pop_front();
      ASSERT_EQ(got, want);
      if (got) {  // recycle
        if (next == t.size()) next = 0;
      }
    }
    ASSERT_EQ(q.size(), ref.size());
    if (next == t.size() && !ref.empty()) {
      // drain so every Thread is back out of the queue before reuse
      while (Thread* x = q.pop_front()) {
        ASSERT_EQ(x, ref.front());
        ref.pop_front();
      }
      next = 0;
    }
  }
}

}  // namespace
