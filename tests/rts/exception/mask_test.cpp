// mask_test.cpp - mask / uninterruptible_mask / get_mask_state: masked
// threads defer asynchronous exceptions until they unmask or block
// interruptibly; forked threads inherit the mask.
#include <atomic>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"

using namespace capstan;
using namespace std::chrono_literals;
using capstan_test::WithCaps;
using capstan_test::green_wait_until;

namespace {

class Mask : public WithCaps {};

struct boom {};

TEST_P(Mask, StatesNestAndRestore) {
  run([] {
    EXPECT_EQ(get_mask_state(), mask_state::unmasked);
    int r = mask([] {
      EXPECT_EQ(get_mask_state(), mask_state::masked_interruptible);
      uninterruptible_mask([] {
        EXPECT_EQ(get_mask_state(), mask_state::masked_uninterruptible);
        // mask inside uninterruptible_mask stays uninterruptible (GHC).
        mask([] { EXPECT_EQ(get_mask_state(), mask_state::masked_uninterruptible); });
      });
      return 5;
    });
    EXPECT_EQ(r, 5);
    mask([](auto restore) {
      restore([] { EXPECT_EQ(get_mask_state(), mask_state::unmasked); });
      EXPECT_EQ(get_mask_state(), mask_state::masked_interruptible);
    });
    EXPECT_EQ(get_mask_state(), mask_state::unmasked);
    // An exception out of f puts the state back too.
    EXPECT_THROW(mask([]() -> int { throw boom{}; }), boom);
    EXPECT_EQ(get_mask_state(), mask_state::unmasked);
  });
}

TEST_P(Mask, ForkedThreadsInheritTheMask) {
  run([] {
    mvar<mask_state> child;
    mask([&] { fork_io([&] { child.put(get_mask_state()); }); });
    EXPECT_EQ(child.take(), mask_state::masked_interruptible);
    fork_io([&] { child.put(get_mask_state()); });
    EXPECT_EQ(child.take(), mask_state::unmasked);
  });
}

// A masked computing thread is not interrupted at safe points; the
// exception lands when it unmasks, and throw_to waits for that.
TEST_P(Mask, MaskedThreadDefersUntilUnmask) {
  run([] {
    std::atomic<bool> in_mask{false}, leave{false};
    std::atomic<int> stage{0};  // 1: finished the masked part, 2: raised after it
    thread_id t = fork_io([&] {
      try {
        mask([&] {
          in_mask = true;
          while (!leave.load()) yield_point();
          stage = 1;
        });
        stage = 3;  // not reached: the exception lands at unmask
      } catch (const boom&) {
        if (stage == 1) stage = 2;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return in_mask.load(); }));
    // Let t leave its mask only once main waits in throw_to (not after a
    // 10 ms sleep: main descheduled that long at -N2 and up threw to a
    // thread that had unmasked and finished, and nothing ever landed).
    const thread_id me = self();
    fork_io([&, me] {
      (void)green_wait_until([&] { return state_of(me) == thread_state::blocked; });
      leave = true;
    });
    throw_to(t, boom{});
    EXPECT_GE(stage.load(), 1) << "throw_to returned before the target unmasked";
    ASSERT_TRUE(green_wait_until([&] { return stage.load() == 2; }));
  });
}

// Masked (interruptibly), a blocking call is still interrupted.
TEST_P(Mask, InterruptibleBlockingCallInsideMask) {
  run([] {
    mvar<int> never;
    std::atomic<bool> caught{false};
    thread_id t = fork_io([&] {
      mask([&] {
        try {
          never.take();
        } catch (const boom&) {
          caught = true;
        }
      });
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    throw_to(t, boom{});
    ASSERT_TRUE(green_wait_until([&] { return caught.load(); }));
  });
}

// A thread that blocks while masked with an exception already pending
// raises it instead of blocking.
TEST_P(Mask, PendingExceptionRaisedAtTheNextBlockingCall) {
  run([] {
    std::atomic<bool> in_mask{false}, go{false}, caught{false};
    mvar<int> never;
    thread_id t = fork_io([&] {
      mask([&] {
        in_mask = true;
        while (!go.load()) yield_point();
        try {
          never.take();
        } catch (const boom&) {
          caught = true;
        }
      });
    });
    ASSERT_TRUE(green_wait_until([&] { return in_mask.load(); }));
    // go only once main waits in throw_to, so that the exception is
    // pending when t blocks (after a 10 ms sleep, a late main found t
    // already blocked, and the pending path went untested).
    const thread_id me = self();
    fork_io([&, me] {
      (void)green_wait_until([&] { return state_of(me) == thread_state::blocked; });
      go = true;
    });
    throw_to(t, boom{});
    EXPECT_TRUE(go.load());
    ASSERT_TRUE(green_wait_until([&] { return caught.load(); }));
    EXPECT_EQ(never.waiting(), 0u);
  });
}

// Uninterruptibly masked, a blocking call is not interrupted: the
// exception waits until the mask ends.
TEST_P(Mask, UninterruptibleMaskDefersPastABlockingCall) {
  run([] {
    mvar<int> box;
    std::atomic<int> got{0};
    std::atomic<bool> caught_after{false};
    thread_id t = fork_io([&] {
      try {
        uninterruptible_mask([&] { got = box.take(); });
      } catch (const boom&) {
        caught_after = got.load() == 9;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return box.waiting() == 1; }));
    thread_id thrower = fork_io([&] { throw_to(t, boom{}); });
    ASSERT_TRUE(green_wait_until([&] { return state_of(thrower) == thread_state::blocked; }));
    EXPECT_EQ(state_of(t), thread_state::blocked) << "an uninterruptible wait was interrupted";
    box.put(9);
    ASSERT_TRUE(green_wait_until([&] { return state_of(thrower) == thread_state::finished; }));
    // The throw returns once raised in t; t's handler may still be
    // running on another capability.
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::finished; }));
    EXPECT_TRUE(caught_after.load());
  });
}

// threads006's shape: n threads created masked, each killed from another
// thread; every kill returns once its target has finished.
TEST_P(Mask, KillThreadsCreatedMasked) {
  run([] {
    constexpr int n = 2000;
    std::vector<thread_id> ids;
    std::atomic<int> bodies{0};
    mask([&] {
      for (int i = 0; i < n; ++i) ids.push_back(fork_io([&] { bodies.fetch_add(1); }));
    });
    mvar<int> done;
    fork_io([&] {
      for (thread_id t : ids) kill_thread(t);
      done.put(1);
    });
    done.take();
    for (thread_id t : ids) EXPECT_NE(state_of(t), thread_state::running);
    EXPECT_EQ(bodies.load(), n) << "a masked thread was killed before it ran";
  });
}

CAPSTAN_INSTANTIATE_CAPS(Mask);

}  // namespace
