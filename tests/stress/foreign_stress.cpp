// foreign_stress.cpp - safe calls, in-calls and bound threads mixed at random:
// every capability hand-over (lazy release, claim by a sender, spare
// take-over, returning caller, bound hand-off, in-call claim) happens many
// times in random interleavings.  Tokens circulate through mvars and must
// all come back exactly once; a lost wake-up shows up as a watchdog abort.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "stress.hpp"

namespace {

struct Param {
  unsigned caps;
  long slice_us;
};

class ForeignStress : public ::testing::TestWithParam<Param> {};

INSTANTIATE_TEST_SUITE_P(, ForeignStress,
                         ::testing::Values(Param{1, 0}, Param{1, 20000}, Param{2, 0},
                                           Param{2, 1000}, Param{4, 0}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.caps) + "_C" +
                                  std::to_string(info.param.slice_us) + "us";
                         });

long tid() { return syscall(SYS_gettid); }

// One step of a worker: a random mix of runtime operations around the token.
void step(std::mt19937_64& rng, capstan::mvar<long>& in, capstan::mvar<long>& out) {
  long v = in.take();
  switch (rng() % 5) {
    case 0:  // a trivial safe call (lazy release, CAS back)
      v += capstan::safe_call([] { return 0L; });
      break;
    case 1:  // a blocking one (a spare takes over if anything is runnable)
      capstan::safe_call([&] { std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200)); });
      break;
    case 2:  // C code calling back in, nested
      v += capstan::safe_call([] { return capstan::call_in([] { capstan::yield(); return 0L; }); });
      break;
    case 3:
      capstan::yield();
      break;
    default:
      break;
  }
  out.put(v);
}

// Note [Deferred hand-off]: a blocking safe call entered while a thread
// waits must get that thread run by a spare Task, however its entry falls
// against the ticker switching its watch on and off (it stops after
// kQuietPolls quiet polls, 10 ms: the gaps between rounds straddle that).
TEST_P(ForeignStress, DeferredCallsAreNeverStranded) {
  stress::Watchdog dog(std::chrono::seconds(120), "deferred hand-off stress");
  const int kRounds = 60 / stress::kScale + 1;
  std::uint64_t handed = 0;
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    std::mt19937_64 rng(stress::seed());
    for (int r = 0; r < kRounds; ++r) {
      capstan::sleep_for(std::chrono::microseconds(8000 + rng() % 4000));
      std::atomic<bool> ran{false};
      capstan::mvar<int> done;
      capstan::mvar<bool> saw;
      // Both on main's capability, the caller first: it enters the call
      // with the other queued, and blocks until that one has run.
      capstan::fork_on(0, [&] {
        saw.put(capstan::safe_call([&] { return capstan_test::os_wait_until([&] { return ran.load(); }); }));
      });
      capstan::fork_on(0, [&] {
        ran = true;
        done.put(1);
      });
      EXPECT_TRUE(saw.take()) << "round " << r;
      done.take();
    }
    for (const auto& c : capstan::statistics().capabilities) handed += c.safe_call_handoffs;
  });
  // With one capability only a spare can run the queued thread: a hand-off
  // per round.  With more, an idle capability may take it first.
  EXPECT_GE(handed, GetParam().caps == 1 ? static_cast<std::uint64_t>(kRounds) : 1u);
}

TEST_P(ForeignStress, TokensSurviveEveryHandOver) {
  stress::Watchdog dog(std::chrono::seconds(180), "foreign stress");
  const int kRounds = 1500 / stress::kScale;
  constexpr int kRing = 6;  // unbound, bound (fork_os) and foreign in-call stages
  long moved = 0;
  capstan::run(capstan_test::opts(GetParam().caps, std::chrono::microseconds(GetParam().slice_us)), [&] {
    std::vector<std::unique_ptr<capstan::mvar<long>>> box;
    for (int i = 0; i <= kRing; ++i) box.push_back(std::make_unique<capstan::mvar<long>>());
    capstan::mvar<long> bound_moves;
    for (int s = 0; s < kRing; ++s) {
      auto body = [&, s] {
        std::mt19937_64 rng(stress::seed() + static_cast<std::uint64_t>(s));
        long me = tid();
        long changes = 0;
        bool bound = capstan::is_bound();
        for (int r = 0; r < kRounds; ++r) {
          step(rng, *box[s], *box[s + 1]);
          if (bound) changes += tid() != me;
        }
        bound_moves.put(changes);
      };
      if (s % 3 == 1) capstan::fork_os(body);
      else if (s % 3 == 2) capstan::fork_on(static_cast<unsigned>(s), body);
      else capstan::fork_io(body);
    }
    // A foreign OS thread feeds the ring through in-calls and collects it.
    capstan::safe_call([&] {
      std::thread feeder([&] {
        for (int r = 0; r < kRounds; ++r) {
          capstan::call_in([&] { box[0]->put(r); });
          long v = capstan::call_in([&] { return box[kRing]->take(); });
          EXPECT_EQ(v, r);
        }
      });
      feeder.join();
    });
    for (int s = 0; s < kRing; ++s) moved += bound_moves.take();
  });
  EXPECT_EQ(moved, 0) << "a bound thread ran on another OS thread";
  EXPECT_EQ(capstan::statistics().live_threads, 0u);
}

}  // namespace
