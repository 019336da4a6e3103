// handover_test.cpp - white-box tests of Note [Handing over a capability]:
// the hold word (held / sleeping / free), try_grab_capability, give_capability_to_task and
// wait_for_capability, release_capability and its spares, and the sender's
// half (notify_capability).  Capabilities and Tasks are made by hand; no
// runtime runs (rt is only read for stop and the spare limit).
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

#include "capstan_test.hpp"
#include "white_box.hpp"
#include "runtime/runtime.hpp"
#include "schedule/schedule.hpp"
#include "task/handover.hpp"

namespace {

using capstan::rts::Capability;
using capstan::rts::Hold;
using capstan::rts::rt;
using capstan::rts::Task;
using capstan::rts::Thread;
using capstan_test::eventually;
using capstan_test::kScale;
using capstan_test::Rng;
using capstan_test::spin;
using capstan_test::thread_sleeps_on;

// Lets every Task stuck in wait_for_capability out (as shutdown does), so a
// failing test ends instead of hanging.
void release_waiters(std::initializer_list<Task*> tasks) {
  rt.stop.store(true, std::memory_order_seq_cst);
  for (Task* t : tasks) t->parker.unpark();
}

class HandOver : public ::testing::Test {
 protected:
  capstan_test::WhiteBoxRuntime runtime_;  // first: outlives the rest
  void SetUp() override {
    ASSERT_FALSE(capstan::rts::process.running.load())
        << "these tests drive the units without a runtime";
    rt.stop.store(false);  // a finished run leaves it set
  }
  void TearDown() override { rt.stop.store(false); }
};

TEST_F(HandOver, OnlyAFreeCapabilityCanBeClaimed) {
  Capability cap;
  cap.hold.store(Hold::held);
  EXPECT_FALSE(capstan::rts::try_grab_capability(&cap));
  EXPECT_EQ(cap.hold.load(), Hold::held);
  cap.hold.store(Hold::sleeping);
  EXPECT_FALSE(capstan::rts::try_grab_capability(&cap));
  EXPECT_EQ(cap.hold.load(), Hold::sleeping);
  cap.hold.store(Hold::free);
  EXPECT_TRUE(capstan::rts::try_grab_capability(&cap));
  EXPECT_EQ(cap.hold.load(), Hold::held);
  EXPECT_FALSE(capstan::rts::try_grab_capability(&cap)) << "claimed twice";
}

TEST_F(HandOver, AFreeCapabilityIsClaimedByExactlyOneOfNRacingClaimers) {
  constexpr int kClaimers = 4;
  const int rounds = 4000 / kScale;
  std::vector<std::unique_ptr<Capability>> caps;
  for (int r = 0; r < rounds; ++r) {
    caps.push_back(std::make_unique<Capability>());
    caps.back()->hold.store(Hold::free);
  }
  std::vector<std::atomic<int>> wins(static_cast<std::size_t>(rounds));
  std::barrier sync(kClaimers);
  std::vector<std::thread> claimers;
  for (int c = 0; c < kClaimers; ++c) {
    claimers.emplace_back([&, c] {
      Rng rng(static_cast<std::uint64_t>(c) + 1);
      for (int r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();
        spin(rng.below(300));
        if (capstan::rts::try_grab_capability(caps[static_cast<std::size_t>(r)].get()))
          wins[static_cast<std::size_t>(r)].fetch_add(1);
      }
    });
  }
  for (auto& t : claimers) t.join();
  for (int r = 0; r < rounds; ++r) {
    ASSERT_EQ(wins[static_cast<std::size_t>(r)].load(), 1) << "round " << r;
    ASSERT_EQ(caps[static_cast<std::size_t>(r)]->hold.load(), Hold::held);
  }
}

// A capability passed back and forth between two Tasks: every give is
// received exactly once, by the Task it was given to, with the thread it
// was given with, and the receiver is then the capability's running_task.
// Random spins put each give before, during or after the receiver's
// start of waiting.
TEST_F(HandOver, AGiveIsReceivedExactlyOnceWithItsThread) {
  const int rounds = 20000 / kScale;
  Capability cap;
  Task a, b;
  std::vector<Thread> firsts(static_cast<std::size_t>(rounds));
  std::atomic<int> received_a{0}, received_b{0}, errors{0};
  std::atomic<bool> done_a{false}, done_b{false};
  // Round r is given by (r even ? a : b) to the other, with firsts[r].
  auto player = [&](Task* me, Task* other, int parity, std::atomic<int>* received,
                    std::atomic<bool>* done) {
    Rng rng(static_cast<std::uint64_t>(parity) + 7);
    if (parity == 0) capstan::rts::take_capability(me, &cap);
    for (int r = parity; r < rounds; r += 2) {
      if (r > 0) {  // receive round r-1 from the other
        spin(rng.below(200));
        if (!capstan::rts::wait_for_capability(me)) break;  // released by the guard
        received->fetch_add(1);
        if (me->cap != &cap || me->given_thread != &firsts[static_cast<std::size_t>(r - 1)] ||
            cap.running_task.load() != me || me->given.load())
          errors.fetch_add(1);
      }
      spin(rng.below(200));
      capstan::rts::give_capability_to_task(other, capstan::rts::drop_capability(me),
                         &firsts[static_cast<std::size_t>(r)]);
    }
    done->store(true);
  };
  std::thread ta(player, &a, &b, 0, &received_a, &done_a);
  std::thread tb(player, &b, &a, 1, &received_b, &done_b);
  bool finished = eventually([&] { return done_a.load() && done_b.load(); });
  if (!finished) release_waiters({&a, &b});
  ta.join();
  tb.join();
  ASSERT_TRUE(finished) << "a give was lost: a Task still waits";
  EXPECT_EQ(errors.load(), 0) << "a receiver saw the wrong capability, thread or holder";
  // b receives rounds 0, 2, ...; a receives 1, 3, ... (the last give has no receiver).
  EXPECT_EQ(received_b.load(), rounds / 2);
  EXPECT_EQ(received_a.load(), (rounds - 1) / 2);
  EXPECT_TRUE(b.given.load() || a.given.load()) << "the last give was not recorded";
}

// give racing with the receiver starting to wait, and with stale senders
// unparking the receiver for nothing (a sender that read running_task
// just before a hand-over): the receiver gets the capability once, and
// only after the give.
TEST_F(HandOver, NoLostWakeUpWhenAGiveRacesWithTheReceiverStartingToWait) {
  const int rounds = 5000 / kScale;
  Capability cap;
  Thread first;
  Task receiver;
  std::atomic<int> gives{0}, receipts{0}, early{0};
  std::atomic<bool> done{false};
  std::barrier sync(3);
  std::thread recv([&] {
    Rng rng(11);
    for (int r = 0; r < rounds; ++r) {
      sync.arrive_and_wait();
      spin(rng.below(400));
      if (!capstan::rts::wait_for_capability(&receiver)) {
        sync.arrive_and_drop();  // the others' next rounds go on without us
        return;
      }
      if (gives.load() != r + 1 || receiver.cap != &cap || receiver.given_thread != &first)
        early.fetch_add(1);
      receipts.fetch_add(1);
      capstan::rts::drop_capability(&receiver);
    }
    done.store(true);
  });
  std::thread giver([&] {
    Rng rng(12);
    for (int r = 0; r < rounds; ++r) {
      sync.arrive_and_wait();
      spin(rng.below(400));
      gives.fetch_add(1);  // before the give: a receipt must see it
      capstan::rts::give_capability_to_task(&receiver, &cap, &first);
      // Wait for the receipt before the next round (no round overlaps).
      while (receipts.load() < r + 1 && !rt.stop.load()) std::this_thread::yield();
    }
  });
  std::thread stale([&] {
    Rng rng(13);
    for (int r = 0; r < rounds; ++r) {
      sync.arrive_and_wait();
      spin(rng.below(400));
      receiver.parker.unpark();
    }
  });
  bool finished = eventually([&] { return done.load(); });
  if (!finished) {
    release_waiters({&receiver});
    receipts.store(-1);
  }
  recv.join();
  giver.join();
  stale.join();
  ASSERT_TRUE(finished) << "the receiver missed a give";
  EXPECT_EQ(early.load(), 0) << "the receiver left wait_for_capability without a give";
  EXPECT_EQ(receipts.load(), rounds);
}

// A receiver asleep in wait_for_capability that is unparked without a give
// goes back to sleep; the give that follows wakes it with the capability.
TEST_F(HandOver, ASpuriousUnparkIsNotAHandOver) {
  Capability cap;
  Task receiver;
  std::atomic<bool> returned{false}, got{false};
  std::thread recv([&] {
    got.store(capstan::rts::wait_for_capability(&receiver));
    returned.store(true);
  });
  ASSERT_TRUE(eventually([&] { return thread_sleeps_on(&receiver.parker); }));
  receiver.parker.unpark();  // a stale sender
  // It wakes, finds nothing handed, and parks again: the parker's word
  // (its only member) goes back to 0 only once the woken thread's park()
  // has consumed the wake-up, so a thread that had not yet run cannot
  // pass for one that re-parked.
  auto word = reinterpret_cast<const std::atomic<std::uint32_t>*>(&receiver.parker);
  static_assert(sizeof(capstan::rts::Parker) == sizeof(std::atomic<std::uint32_t>));
  bool reparked = eventually([&] {
    return (word->load() == 0 && thread_sleeps_on(&receiver.parker)) || returned.load();
  });
  EXPECT_TRUE(reparked);
  EXPECT_FALSE(returned.load()) << "wait_for_capability returned without a give";
  capstan::rts::give_capability_to_task(&receiver, &cap, nullptr);
  bool woke = eventually([&] { return returned.load(); });
  if (!woke) release_waiters({&receiver});
  recv.join();
  ASSERT_TRUE(woke);
  EXPECT_TRUE(got.load());
  EXPECT_EQ(receiver.cap, &cap);
  EXPECT_EQ(cap.running_task.load(), &receiver);
}

TEST_F(HandOver, AWaitingTaskIsReleasedWithoutACapabilityWhenTheRuntimeStops) {
  Task receiver;
  std::atomic<int> result{-1};
  std::thread recv([&] { result.store(capstan::rts::wait_for_capability(&receiver) ? 1 : 0); });
  ASSERT_TRUE(eventually([&] { return thread_sleeps_on(&receiver.parker); }));
  release_waiters({&receiver});
  recv.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_EQ(receiver.cap, nullptr);
}

// --- release_capability and its spares -------------------------------------

// A holder with `cap` on the calling OS thread, and `spare` filed as its spare.
struct Held {
  Capability cap;
  Task holder, spare;
  Held() {
    capstan::rts::take_capability(&holder, &cap);
    spare.last_cap = &cap;
    EXPECT_TRUE(capstan::rts::become_spare(&spare));
  }
  ~Held() {  // take_capability set them; cap dies with us
    capstan::detail::tl_here = {};
  }
};

TEST_F(HandOver, ReleasingAnEmptyCapabilityMakesItFree) {
  Held h;
  capstan::rts::release_capability(&h.holder);
  EXPECT_EQ(h.cap.hold.load(), Hold::free);
  EXPECT_EQ(h.holder.cap, nullptr);
  EXPECT_FALSE(h.spare.given.load()) << "a capability without work woke a spare";
  EXPECT_EQ(h.cap.n_spares, 1u);
}

TEST_F(HandOver, ReleasingACapabilityWithWorkGivesItToASpare) {
  Held h;
  Thread runnable;
  h.cap.run_queue.push_back(&runnable);
  capstan::rts::release_capability(&h.holder);
  EXPECT_EQ(h.cap.hold.load(), Hold::held);
  EXPECT_TRUE(h.spare.given.load());
  EXPECT_EQ(h.spare.given_cap, &h.cap);
  EXPECT_EQ(h.spare.given_thread, nullptr);
  EXPECT_EQ(h.cap.running_task.load(), &h.spare);
  EXPECT_EQ(h.cap.n_spares, 0u);
  EXPECT_EQ(h.cap.run_queue.front(), &runnable) << "the work stays queued for the spare";
}

TEST_F(HandOver, WorkThatArrivedInTheInboxIsSeenAtRelease) {
  Held h;
  Thread sent;
  h.cap.inbox.push(&sent);
  capstan::rts::release_capability(&h.holder);
  EXPECT_EQ(h.cap.hold.load(), Hold::held);
  EXPECT_TRUE(h.spare.given.load());
  EXPECT_EQ(h.cap.run_queue.front(), &sent) << "the inbox was drained into the run queue";
}

TEST_F(HandOver, ABoundThreadAtTheFrontGoesStraightToItsTask) {
  Held h;
  Task bound_task;
  Thread bound;
  bound.bound_task = &bound_task;
  h.cap.run_queue.push_back(&bound);
  capstan::rts::release_capability(&h.holder);
  EXPECT_TRUE(bound_task.given.load());
  EXPECT_EQ(bound_task.given_cap, &h.cap);
  EXPECT_EQ(bound_task.given_thread, &bound);
  EXPECT_TRUE(h.cap.run_queue.empty());
  EXPECT_FALSE(h.spare.given.load());
  EXPECT_EQ(h.cap.running_task.load(), &bound_task);
}

// notify_capability, the sender's half, in each state of the hold word.
TEST_F(HandOver, NotifyingAHeldCapabilityChangesNothing) {
  Held h;
  capstan::rts::notify_capability(&h.cap);
  EXPECT_EQ(h.cap.hold.load(), Hold::held);
  EXPECT_FALSE(h.spare.given.load());
}

TEST_F(HandOver, NotifyingAFreeCapabilityClaimsItForASpare) {
  Held h;
  capstan::rts::release_capability(&h.holder);
  ASSERT_EQ(h.cap.hold.load(), Hold::free);
  capstan::rts::notify_capability(&h.cap);
  EXPECT_EQ(h.cap.hold.load(), Hold::held);
  EXPECT_TRUE(h.spare.given.load());
  EXPECT_EQ(h.cap.running_task.load(), &h.spare);
}

TEST_F(HandOver, NotifyingASleepingCapabilityWakesItsTask) {
  Capability cap;
  Task sleeper;
  cap.running_task.store(&sleeper);
  cap.hold.store(Hold::sleeping);
  std::atomic<bool> woke{false};
  std::thread t([&] {
    sleeper.parker.park();
    woke.store(true);
  });
  ASSERT_TRUE(eventually([&] { return thread_sleeps_on(&sleeper.parker); }));
  capstan::rts::notify_capability(&cap);
  bool ok = eventually([&] { return woke.load(); });
  if (!ok) sleeper.parker.unpark();
  t.join();
  EXPECT_TRUE(ok) << "the sleeping holder was not woken";
  EXPECT_EQ(cap.hold.load(), Hold::sleeping) << "only the holder leaves `sleeping`";
}

// The Dekker hand-shake of the Note: a holder releasing an idle capability
// races with a sender pushing work and notifying.  Whatever the
// interleaving, the work is not stranded on a free capability, and exactly
// one party claims it: the last-filed spare gets it, the other spare not.
TEST_F(HandOver, ReleaseRacingWithASenderNeverStrandsWorkAndClaimsOnce) {
  const int rounds = 40000 / kScale;
  struct Round {
    Capability cap;
    Task holder, spare_a, spare_b;
    Thread work;
  };
  std::vector<std::unique_ptr<Round>> rs;
  for (int r = 0; r < rounds; ++r) {
    auto x = std::make_unique<Round>();
    x->spare_a.last_cap = x->spare_b.last_cap = &x->cap;
    ASSERT_TRUE(capstan::rts::become_spare(&x->spare_a));
    ASSERT_TRUE(capstan::rts::become_spare(&x->spare_b));  // popped first
    rs.push_back(std::move(x));
  }
  capstan_test::SpinBarrier sync(2);
  std::thread releaser([&] {
    Rng rng(21);
    for (auto& x : rs) {
      capstan::rts::take_capability(&x->holder, &x->cap);
      sync.arrive_and_wait();
      spin(rng.below(64));
      capstan::rts::release_capability(&x->holder);
    }
  });
  std::thread sender([&] {
    Rng rng(22);
    for (auto& x : rs) {
      sync.arrive_and_wait();
      spin(rng.below(64));
      x->cap.inbox.push(&x->work);
      capstan::rts::notify_capability(&x->cap);
    }
  });
  releaser.join();
  sender.join();
  int stranded = 0, double_claims = 0;
  for (auto& x : rs) {
    if (!x->spare_b.given.load() || x->cap.hold.load() == Hold::free ||
        x->cap.running_task.load() != &x->spare_b)
      ++stranded;
    if (x->spare_a.given.load()) ++double_claims;
  }
  EXPECT_EQ(stranded, 0) << "work reached a free capability and nobody claimed it";
  EXPECT_EQ(double_claims, 0) << "both the releaser and the sender passed the capability on";
}

}  // namespace
