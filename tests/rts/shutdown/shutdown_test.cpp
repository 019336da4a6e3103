// shutdown_test.cpp - what shutdown does with a thread that blocks in a
// destructor while it unwinds from thread_killed (Note [Blocked while
// unwinding] in rts/shutdown/shutdown.cpp).
#include <atomic>
#include <memory>
#include <string>

#include "capstan_test.hpp"

extern "C" const char* __lsan_default_suppressions() {
  return "leak:abandoned_thread_body\n";  // see abandoned_thread_body
}

namespace {

using capstan_test::WithCaps;

class Shutdown : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Shutdown);

struct Counted {
  std::atomic<int>* n;
  ~Counted() { n->fetch_add(1); }
};

// Takes from an mvar in its destructor: run while the thread unwinds.
struct TakesWhenDestroyed {
  capstan::mvar<int>* m;
  std::atomic<int>* took;
  ~TakesWhenDestroyed() {
    m->take();
    took->fetch_add(1);
  }
};

// Puts into an mvar in its destructor.
struct PutsWhenDestroyed {
  capstan::mvar<int>* m;
  ~PutsWhenDestroyed() { m->put(7); }
};

// The body of the thread the second test abandons.  Its thread_killed,
// in flight when the thread blocked in ~TakesWhenDestroyed, is never
// freed: the rest of the stack is dropped without unwinding (Note [Blocked
// while unwinding]).  LeakSanitizer is told to expect that one object.
[[gnu::noinline]] void abandoned_thread_body(std::atomic<int>* outer, std::atomic<int>* took,
                                             std::atomic<bool>* blocked, capstan::mvar<int>* never,
                                             capstan::mvar<int>* gate) {
  Counted c{outer};
  TakesWhenDestroyed w{never, took};
  *blocked = true;
  gate->take();
  asm volatile("" ::: "memory");  // keeps this frame: no tail call
}

// A thread blocked in a destructor while unwinding is not interrupted,
// but it is an ordinary waiter: another thread unwinding at the same
// shutdown can fill its mvar, and then it finishes its unwinding and
// nothing is abandoned (the fixture checks that).
TEST_P(Shutdown, ABlockedUnwindingThreadWokenByAnotherFinishes) {
  // Every mvar outlives run(): one destroyed under its waiters would end
  // them with blocked_indefinitely, not thread_killed.
  capstan::mvar<int> handoff, a_gate, b_gate;
  std::atomic<int> outer{0}, took{0};
  std::atomic<bool> a_blocked{false}, b_blocked{false};
  run([&] {
    capstan::fork_io([&] {
      Counted c{&outer};
      TakesWhenDestroyed t{&handoff, &took};
      a_blocked = true;
      a_gate.take();  // killed here; ~t then blocks on handoff
    });
    capstan::fork_io([&] {
      Counted c{&outer};
      PutsWhenDestroyed p{&handoff};
      b_blocked = true;
      b_gate.take();  // killed here; ~p fills handoff
    });
    while (!a_blocked || !b_blocked || a_gate.waiting() != 1 || b_gate.waiting() != 1)
      capstan::yield();
  });
  EXPECT_EQ(took.load(), 1) << "A's destructor never got past its take";
  EXPECT_EQ(outer.load(), 2) << "a stack was not unwound to the bottom";
  EXPECT_TRUE(handoff.is_empty());
  EXPECT_EQ(capstan::statistics().threads_killed, 2u);
}

// With nobody to wake it, such a thread cannot be interrupted (a throw
// from a destructor during unwinding would terminate()), so shutdown
// waits out the grace period and abandons it: the rest of its stack is
// freed without unwinding, it is reported on stderr and counted.  Every
// other thread is killed and unwound as usual.
TEST_P(Shutdown, ABlockedUnwindingThreadNobodyWakesIsAbandonedAlone) {
  expect_abandoned(1);
  capstan::mvar<int> never, gate, other_gate;  // outlive run(), as above
  std::atomic<int> outer{0}, took{0}, others{0};
  std::atomic<bool> blocked{false};
  constexpr int kOthers = 20;
  testing::internal::CaptureStderr();
  run([&] {
    auto t = capstan::fork_io([&] { abandoned_thread_body(&outer, &took, &blocked, &never, &gate); });
    capstan::label_thread(t, "waits-in-destructor");
    for (int i = 0; i < kOthers; ++i)
      capstan::fork_io([&] {
        Counted c{&others};
        other_gate.take();
      });
    while (!blocked || gate.waiting() != 1 || other_gate.waiting() != kOthers) capstan::yield();
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("waits-in-destructor"), std::string::npos) << err;
  EXPECT_EQ(took.load(), 0);
  EXPECT_EQ(outer.load(), 0) << "an abandoned stack is not unwound";
  EXPECT_EQ(others.load(), kOthers) << "the other threads were not all unwound";
  auto s = capstan::statistics();
  EXPECT_EQ(s.threads_killed, static_cast<std::uint64_t>(kOthers));
}

}  // namespace
