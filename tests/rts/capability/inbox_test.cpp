// inbox_test.cpp - the lock-free MPSC inbox under concurrent producers.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "capability/inbox.hpp"

namespace {

using capstan::rts::Inbox;
using capstan::rts::Thread;

std::atomic<bool> no_mark{false};  // a capability's runtime_loop, for the tests that ignore it

TEST(Inbox, TakeAllReturnsArrivalOrder) {
  std::vector<Thread> t(5);
  Inbox in;
  for (auto& x : t) in.push(&x);
  Thread* h = in.take_all(no_mark);
  for (auto& x : t) {
    ASSERT_EQ(h, &x);
    h = h->link;
  }
  EXPECT_EQ(h, nullptr);
  EXPECT_EQ(in.take_all(no_mark), nullptr);
}

TEST(Inbox, PushChainKeepsChainOrder) {
  std::vector<Thread> t(6);
  Inbox in;
  in.push(&t[0]);
  for (int i = 1; i < 4; ++i) t[i].link = &t[i + 1];
  t[4].link = nullptr;
  in.push_chain(&t[1], &t[4]);
  in.push(&t[5]);
  Thread* h = in.take_all(no_mark);
  for (auto& x : t) {
    ASSERT_EQ(h, &x);
    h = h->link;
  }
}

// Note [Warning about a hog]: taking kLongLoop threads or more marks the
// capability as busy in the runtime's own loop (its caller clears it);
// fewer leave the mark alone.
TEST(Inbox, TakingALongChainMarksTheRuntimesLoop) {
  for (unsigned n : {capstan::rts::kLongLoop - 1, capstan::rts::kLongLoop, 5 * capstan::rts::kLongLoop}) {
    std::vector<Thread> t(n);
    Inbox in;
    for (auto& x : t) in.push(&x);
    std::atomic<bool> mark{false};
    Thread* h = in.take_all(mark);
    EXPECT_EQ(mark.load(), n >= capstan::rts::kLongLoop) << n << " threads";
    unsigned got = 0;
    for (; h; h = h->link) ASSERT_EQ(h, &t[got++]);
    EXPECT_EQ(got, n);
  }
}

// Producers push concurrently while the consumer drains: every thread
// arrives exactly once, and each producer's threads arrive in its order.
TEST(InboxStress, NothingLostNothingDuplicatedPerProducerFifo) {
  constexpr int kProducers = 4, kPerProducer = 50000;
  std::vector<Thread> t(kProducers * kPerProducer);
  for (std::size_t i = 0; i < t.size(); ++i) t[i].id = i;
  Inbox in;
  std::atomic<int> started{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      started.fetch_add(1);
      while (started.load() < kProducers) {
      }
      for (int i = 0; i < kPerProducer; ++i) in.push(&t[static_cast<std::size_t>(p * kPerProducer + i)]);
    });
  }
  std::vector<int> seen(t.size(), 0);
  std::vector<long> last(kProducers, -1);
  std::size_t got = 0;
  while (got < t.size()) {
    for (Thread* h = in.take_all(no_mark); h;) {
      Thread* n = h->link;
      auto id = static_cast<long>(h->id);
      int p = static_cast<int>(id / kPerProducer);
      ASSERT_LT(last[p], id) << "producer " << p << " order broken";
      last[p] = id;
      ++seen[static_cast<std::size_t>(id)];
      ++got;
      h = n;
    }
  }
  for (auto& th : producers) th.join();
  for (int s : seen) ASSERT_EQ(s, 1);
}

}  // namespace
