// mpsc_stack_test.cpp - the intrusive MPSC stack: arrival order after the
// reversal, chains, the "was empty" result, and concurrent producers with a
// consumer taking as they push (nothing lost, per-producer FIFO).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "primitives/mpsc_stack.hpp"

namespace {

struct Node {
  Node* link = nullptr;
  int producer = -1;
  int seq = -1;
};

using Stack = capstan::rts::MpscStack<Node, &Node::link>;

TEST(MpscStack, TakeAllFifoIsArrivalOrderAndPushTellsWhenEmpty) {
  std::vector<Node> n(4);
  Stack s;
  EXPECT_EQ(s.take_all_fifo(), nullptr);
  EXPECT_FALSE(s.maybe_nonempty());
  EXPECT_TRUE(s.push(&n[0]));  // was empty
  EXPECT_FALSE(s.push(&n[1]));
  EXPECT_FALSE(s.push(&n[2]));
  EXPECT_TRUE(s.nonempty_seq_cst());
  Node* h = s.take_all_fifo();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(h, &n[i]);
    h = h->link;
  }
  EXPECT_EQ(h, nullptr);
  EXPECT_TRUE(s.push(&n[3]));  // empty again after the take
  EXPECT_EQ(s.take_all(), &n[3]);
}

TEST(MpscStack, PushChainLandsAboveWhatWasThere) {
  std::vector<Node> n(4);
  Stack s;
  s.push(&n[0]);
  n[3].link = &n[2];
  n[2].link = &n[1];  // top n[3] ... bottom n[1]
  EXPECT_FALSE(s.push_chain(&n[3], &n[1]));
  Node* h = s.take_all();  // last pushed first
  for (int i : {3, 2, 1, 0}) {
    ASSERT_EQ(h, &n[i]);
    h = h->link;
  }
  EXPECT_EQ(h, nullptr);
}

// Producers push while the consumer takes: every node arrives exactly once,
// and each producer's nodes arrive in the order it pushed them.
TEST(MpscStack, ConcurrentProducersLoseNothingAndKeepTheirOrder) {
  const int producers = 4, per = 50'000;
  std::vector<std::vector<Node>> nodes(producers, std::vector<Node>(per));
  Stack s;
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int p = 0; p < producers; ++p) {
    ts.emplace_back([&, p] {
      ready.fetch_add(1);
      while (ready.load() < producers) std::this_thread::yield();
      for (int i = 0; i < per; ++i) {
        nodes[p][i].producer = p;
        nodes[p][i].seq = i;
        s.push(&nodes[p][i]);
      }
    });
  }
  std::vector<int> next(producers, 0);
  long got = 0, bad_order = 0;
  while (got < long(producers) * per) {
    Node* h = s.take_all_fifo();
    if (!h) {
      std::this_thread::yield();
      continue;
    }
    for (; h; h = h->link) {
      if (h->seq != next[h->producer]) ++bad_order;
      next[h->producer] = h->seq + 1;
      ++got;
    }
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad_order, 0);
  for (int p = 0; p < producers; ++p) EXPECT_EQ(next[p], per);
  EXPECT_EQ(s.take_all(), nullptr);  // nothing extra
}

}  // namespace
