// run_queue_test.cpp - the run-queue deque, and the hand-shake by which an
// idle capability steals from it (Note [Stealing from a stalled
// capability]).
#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "capability/run_queue.hpp"
#include "capstan_test.hpp"

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

// drain pops every thread left, in order.
std::vector<Thread*> drain(RunQueue& q) {
  std::vector<Thread*> v;
  while (Thread* x = q.pop_front()) v.push_back(x);
  return v;
}

// A yield's rotation (Note [A yield rotates in one hand-shake]): the front
// comes out and the yielder joins the back, in one operation; from an
// empty queue nothing comes out and the yielder is not queued.
TEST(RunQueue, ARotationTakesTheFrontAndQueuesTheYielderAtTheBack) {
  std::vector<Thread> t(4);
  RunQueue q;
  std::size_t left = 99;
  EXPECT_EQ(q.pop_front(&left, &t[0]), nullptr);
  EXPECT_EQ(left, 0u);
  EXPECT_TRUE(q.empty()) << "a rotation that found nothing must not queue the yielder";
  q.push_back(&t[1]);
  EXPECT_EQ(q.pop_front(&left, &t[0]), &t[1]);
  EXPECT_EQ(left, 0u);  // the yielder is not counted
  EXPECT_EQ(q.size(), 1u);
  q.push_back(&t[2]);
  q.push_back(&t[3]);
  EXPECT_EQ(q.pop_front(&left, &t[1]), &t[0]);
  EXPECT_EQ(left, 2u);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(drain(q), (std::vector<Thread*>{&t[2], &t[3], &t[1]}));
  // The tail is right after a rotation of a one-thread queue.
  q.push_back(&t[0]);
  EXPECT_EQ(q.pop_front(&left, &t[1]), &t[0]);
  q.push_back(&t[2]);
  EXPECT_EQ(drain(q), (std::vector<Thread*>{&t[1], &t[2]}));
  EXPECT_TRUE(q.empty());
}

TEST(RunQueue, MatchesAReferenceDequeUnderRandomOperations) {
  std::vector<Thread> t(1000);
  RunQueue q;
  std::deque<Thread*> ref;
  std::mt19937 rng(42);
  std::size_t next = 0;
  for (int i = 0; i < 100000; ++i) {
    int op = static_cast<int>(rng() % 4);
    if (op == 0 && next < t.size()) {
      q.push_back(&t[next]);
      ref.push_back(&t[next++]);
    } else if (op == 1 && next < t.size()) {
      q.push_front(&t[next]);
      ref.push_front(&t[next++]);
    } else if (op == 2 && next < t.size()) {  // a yield's rotation
      std::size_t left = 0;
      Thread* got = q.pop_front(&left, &t[next]);
      Thread* want = ref.empty() ? nullptr : ref.front();
      ASSERT_EQ(got, want);
      if (!ref.empty()) {
        ref.pop_front();
        ASSERT_EQ(left, ref.size());
        ref.push_back(&t[next++]);
      } else {
        ASSERT_EQ(left, 0u);
      }
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

void membarrier_all() { syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0); }
bool membarrier_registered() {
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

std::vector<Thread*> chain_to_vector(Thread* t) {
  std::vector<Thread*> v;
  for (; t; t = t->link) v.push_back(t);
  return v;
}

// A steal takes half of the threads, rounded up, from the front, leaves
// locked ones in place, and keeps the order of what it takes and of what
// stays.
TEST(RunQueue, StealTakesTheFrontHalfAndLeavesLockedThreads) {
  std::vector<Thread> t(7);
  t[1].locked = true;
  t[4].locked = true;
  RunQueue q;
  for (auto& x : t) q.push_back(&x);
  std::size_t n = 0;
  Thread* got = q.steal_front([] {}, &n);  // single-threaded: no barrier needed
  std::vector<Thread*> stolen = chain_to_vector(got);
  ASSERT_EQ(n, 4u);  // (7 + 1) / 2
  EXPECT_EQ(stolen, (std::vector<Thread*>{&t[0], &t[2], &t[3], &t[5]}));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(drain(q), (std::vector<Thread*>{&t[1], &t[4], &t[6]}));
  // Only locked threads: nothing moves.
  q.push_back(&t[1]);
  EXPECT_EQ(q.steal_front([] {}, &n), nullptr);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(q.pop_front(), &t[1]);
  // The tail is right after a steal that took it: a push_back follows it.
  q.push_back(&t[0]);
  q.push_back(&t[2]);
  EXPECT_EQ(chain_to_vector(q.steal_front([] {}, &n)), (std::vector<Thread*>{&t[0]}));
  q.push_back(&t[3]);
  EXPECT_EQ(q.pop_front(), &t[2]);
  EXPECT_EQ(q.pop_front(), &t[3]);
  EXPECT_TRUE(q.empty());
}

// The hand-shake under fire: an owner OS thread pushes and pops at random
// while a thief OS thread steals as fast as it can.  Every thread is in
// exactly one place at every moment - held by the owner, queued, or held
// by the thief - and each move checks the place it leaves; a steal that
// overlapped an owner operation would move a thread twice, lose one, or
// break the list (and ThreadSanitizer would see the race).
TEST(RunQueueConcurrency, StealsNeverOverlapTheOwner) {
  if (!membarrier_registered()) GTEST_SKIP() << "membarrier is not available here";
  enum Where : int { owner = 0, queued = 1, thief = 2 };
  constexpr int kThreads = 64;
  const int kOps = 400'000 / capstan_test::kScale;
  std::vector<Thread> t(kThreads);
  std::vector<std::atomic<int>> where(kThreads);
  auto index = [&](Thread* x) { return static_cast<int>(x - t.data()); };
  for (int i = 0; i < kThreads; ++i) {
    where[i].store(owner);
    t[i].locked = i % 8 == 0;
  }
  RunQueue q;
  std::mutex back_mu;
  std::vector<Thread*> back;  // stolen threads the thief returns to the owner
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, stolen{0}, steals{0};

  std::thread thief_thread([&] {
    std::mt19937 pause_rng(11);
    while (!stop.load(std::memory_order_relaxed)) {
      for (unsigned k = pause_rng() % 64; k != 0; --k) capstan::rts::cpu_relax();  // vary the phase
      std::size_t n = 0;
      std::vector<Thread*> got = chain_to_vector(q.steal_front(&membarrier_all, &n));
      if (got.size() != n) bad.fetch_add(1);
      for (Thread* x : got) {
        int i = index(x);
        if (x->locked || where[i].exchange(thief) != queued) bad.fetch_add(1);
      }
      if (!got.empty()) steals.fetch_add(1);
      stolen.fetch_add(static_cast<long>(got.size()));
      std::lock_guard<std::mutex> g(back_mu);
      for (Thread* x : got) back.push_back(x);
    }
  });

  std::vector<Thread*> held;
  for (auto& x : t) held.push_back(&x);
  std::mt19937 rng(7);
  // At least kOps operations, and on until the thief has got in a few
  // times: on a loaded machine its OS thread may not even start before
  // kOps are done (kWaitGuard turns a thief that never runs into the
  // failure below, not a hang).
  constexpr long kMinSteals = 50;
  auto guard = std::chrono::steady_clock::now() + capstan_test::kWaitGuard;
  auto more = [&](int op) {
    if (op < kOps) return true;
    if (steals.load(std::memory_order_relaxed) >= kMinSteals) return false;
    return op % 1024 != 0 || std::chrono::steady_clock::now() < guard;
  };
  for (int op = 0; more(op); ++op) {
    if (op % 64 == 0) {  // take back what the thief returned
      std::lock_guard<std::mutex> g(back_mu);
      for (Thread* x : back) {
        if (where[index(x)].exchange(owner) != thief) bad.fetch_add(1);
        held.push_back(x);
      }
      back.clear();
    }
    unsigned r = rng() % 8;
    if (r < 3 && !held.empty()) {
      Thread* x = held.back();
      held.pop_back();
      if (where[index(x)].exchange(queued) != owner) bad.fetch_add(1);
      if (r == 0) q.push_front(x); else q.push_back(x);
    } else if (r == 5 && !held.empty()) {  // a yield's rotation
      Thread* x = held.back();
      // Queued before the call: once linked, the thief may take it at once.
      if (where[index(x)].exchange(queued) != owner) bad.fetch_add(1);
      std::size_t left = 0;
      if (Thread* y = q.pop_front(&left, x)) {
        held.pop_back();
        if (where[index(y)].exchange(owner) != queued) bad.fetch_add(1);
        held.push_back(y);
      } else if (where[index(x)].exchange(owner) != queued) {  // x was not queued
        bad.fetch_add(1);
      }
    } else if (r < 6) {
      if (Thread* x = q.pop_front()) {
        if (where[index(x)].exchange(owner) != queued) bad.fetch_add(1);
        held.push_back(x);
      }
    } else if (r == 6) {
      (void)q.size();
      (void)q.empty();
    } else {
      std::this_thread::yield();  // let the thief find us outside an operation
    }
  }
  stop.store(true);
  thief_thread.join();
  // Account for every thread: held, queued, or returned by the thief.
  std::vector<int> seen(kThreads, 0);
  for (Thread* x : held) ++seen[index(x)];
  for (Thread* x : back) ++seen[index(x)];
  std::size_t queued_n = 0;
  while (Thread* x = q.pop_front()) {
    ++seen[index(x)];
    ++queued_n;
  }
  EXPECT_EQ(queued_n, 0u + static_cast<std::size_t>(std::count_if(
                               where.begin(), where.end(), [](auto& w) { return w.load() == queued; })));
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(seen[i], 1) << "thread " << i;
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(steals.load(), 0) << "the thief never got in: the test tested nothing";
  std::fprintf(stderr, "%ld steals took %ld threads\n", steals.load(), stolen.load());
}

}  // namespace
