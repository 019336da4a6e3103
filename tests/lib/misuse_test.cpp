// misuse_test.cpp - each misuse gets an error naming the call the program
// made, not the runtime function it happened to reach first (Misuse errors
// in docs/api.md): kill_thread, label_thread, async and race outside the
// runtime, and a waiter whose primitive was destroyed under it.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "capstan_test.hpp"

namespace {

std::string message_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(Misuse, ErrorsNameTheCallTheProgramMade) {
  std::string m;
  capstan::run(capstan_test::opts(1), [] {
    std::string m = message_of([] { capstan::kill_thread(capstan::thread_id{}); });
    EXPECT_NE(m.find("capstan::kill_thread"), std::string::npos) << m;
    m = message_of([] { capstan::throw_to(capstan::thread_id{}, std::runtime_error("x")); });
    EXPECT_NE(m.find("capstan::throw_to"), std::string::npos) << m;
    // label_thread with an id that names no thread: an error, as state_of
    // gives (it was silently ignored).
    EXPECT_THROW(capstan::label_thread(capstan::thread_id{}, "x"), capstan::usage_error);
    m = message_of([] { capstan::label_thread(capstan::thread_id{}, "x"); });
    EXPECT_NE(m.find("capstan::label_thread"), std::string::npos) << m;
    // A chan read that would block inside safe_call gets safe_call's message.
    capstan::chan<int> c;
    std::string in_call = capstan::safe_call([&] { return message_of([&] { c.read(); }); });
    EXPECT_NE(in_call.find("inside capstan::safe_call"), std::string::npos) << in_call;
    // A finished thread's id is fine: labelling it does nothing.
    capstan::thread_id done = capstan::fork_io([] {});
    while (capstan::state_of(done) != capstan::thread_state::finished) capstan::yield();
    EXPECT_NO_THROW(capstan::label_thread(done, "late"));
  });
  // A wait_group count that would overflow says so (it said "went negative").
  capstan::wait_group wg;
  wg.add(PTRDIFF_MAX);
  m = message_of([&] { wg.add(1); });
  EXPECT_NE(m.find("overflow"), std::string::npos) << m;
  wg.add(-PTRDIFF_MAX);  // the failed add left the count as it was
  m = message_of([&] { wg.done(); });
  EXPECT_NE(m.find("add(-1) on a count of 0 would make it negative"), std::string::npos) << m;
  wg.add(1);  // a negative add names itself, not done()
  m = message_of([&] { wg.add(-2); });
  EXPECT_NE(m.find("add(-2) on a count of 1 would make it negative"), std::string::npos) << m;
  // Outside the runtime: the error names async / race, not mask.
  m = message_of([] { capstan::async a([] { return 1; }); });
  EXPECT_NE(m.find("capstan::async"), std::string::npos) << m;
  m = message_of([] { capstan::race([] { return 1; }, [] { return 2; }); });
  EXPECT_NE(m.find("capstan::race"), std::string::npos) << m;
  m = message_of([] { capstan::concurrently([] { return 1; }, [] { return 2; }); });
  EXPECT_NE(m.find("capstan::concurrently"), std::string::npos) << m;
  // timeout off a green thread is an error whatever the duration (with
  // d <= 0 it returned nullopt, as if f had timed out).
  for (auto d : {std::chrono::milliseconds(0), std::chrono::milliseconds(-1),
                 std::chrono::milliseconds(5)}) {
    m = message_of([d] { (void)capstan::timeout(d, [] { return 1; }); });
    EXPECT_NE(m.find("capstan::timeout"), std::string::npos) << d.count() << " ms: " << m;
  }
}

// what_a_waiter_is_told: a thread blocks with wait(*p) on a primitive made
// by make(); the primitive is destroyed under it; the message of the
// blocked_indefinitely it gets.
template <class Make, class Wait>
std::string what_a_waiter_is_told(Make make, Wait wait) {
  std::string got;
  auto p = make();
  capstan::thread_id t = capstan::fork_io([&] {
    try {
      wait(*p);
    } catch (const capstan::blocked_indefinitely& e) {
      got = e.what();
    }
  });
  while (capstan::state_of(t) != capstan::thread_state::blocked) capstan::yield();
  p.reset();  // destroyed while t waits: t gets blocked_indefinitely
  while (capstan::state_of(t) != capstan::thread_state::finished) capstan::yield();
  return got;
}

// A thread blocked on a primitive that is destroyed under it is told which
// primitive: "mutex lock", not "mvar operation" (an mvar keeps GHC's
// message).
TEST(Misuse, AWaiterOnADestroyedPrimitiveIsToldWhichOne) {
  capstan::run(capstan_test::opts(1), [] {
    std::string got = what_a_waiter_is_told(
        [] {
          auto mu = std::make_unique<capstan::mutex>();
          mu->lock();
          return mu;
        },
        [](capstan::mutex& mu) { mu.lock(); });
    EXPECT_NE(got.find("mutex lock"), std::string::npos) << got;
    got = what_a_waiter_is_told([] { return std::make_unique<capstan::mvar<int>>(); },
                                [](capstan::mvar<int>& m) { m.take(); });
    EXPECT_EQ(got, "thread blocked indefinitely in an mvar operation");
  });
}

}  // namespace

namespace {

// Ids are unique in the process (Note [Thread ids] in rts/thread/threads.cpp):
// an id kept from an earlier run is refused by name, and never reaches the
// thread of this run that would have had the same number were ids
// restarted per run (here: main itself, which a kill would have stopped).
TEST(Misuse, AThreadIdFromAnEarlierRunNamesNoThreadOfThisOne) {
  capstan::thread_id first_main, first_child;
  capstan::run(capstan_test::opts(2), [&] {
    first_main = capstan::self();
    capstan::mvar<int> done;
    first_child = capstan::fork_io([&] { done.put(1); });
    done.take();
  });
  bool main_survived = false;
  capstan::run(capstan_test::opts(2), [&] {
    capstan::thread_id me = capstan::self();
    EXPECT_GT(me, first_main);
    EXPECT_GT(me, first_child);
    capstan::mvar<int> done;
    capstan::thread_id child = capstan::fork_io([&] { done.put(1); });
    done.take();
    EXPECT_GT(child, first_child);
    for (capstan::thread_id old : {first_main, first_child}) {
      std::string m = message_of([&] { capstan::kill_thread(old); });
      EXPECT_NE(m.find("capstan::kill_thread"), std::string::npos) << m;
      EXPECT_NE(m.find("earlier run"), std::string::npos) << m;
      EXPECT_THROW(capstan::state_of(old), capstan::usage_error);
      EXPECT_THROW(capstan::label_thread(old, "x"), capstan::usage_error);
      EXPECT_THROW(capstan::throw_to(old, std::runtime_error("x")), capstan::usage_error);
    }
    main_survived = true;
  });
  EXPECT_TRUE(main_survived);
}

}  // namespace

namespace {

// Ids are handed out in blocks of 1024 per capability: an id inside the
// forker's current block that it has not reached yet named no thread, yet
// state_of said finished and kill_thread did nothing (only ids above
// every block handed out were refused).  Once handed out, the same number
// names its thread.
TEST(Misuse, AnIdNotYetHandedOutIsRefusedInsideItsBlock) {
  capstan::run(capstan_test::opts(2), [] {
    capstan::thread_id child = capstan::fork_io([] {});
    capstan::thread_id unused{child.value() + 5};
    std::string m = message_of([&] { (void)capstan::state_of(unused); });
    EXPECT_NE(m.find("capstan::state_of: no thread with id"), std::string::npos) << m;
    EXPECT_THROW(capstan::kill_thread(unused), capstan::usage_error);
    EXPECT_THROW(capstan::label_thread(unused, "x"), capstan::usage_error);
    EXPECT_THROW(capstan::throw_to(unused, std::runtime_error("x")), capstan::usage_error);
    capstan::thread_id last;
    for (int i = 0; i < 5; ++i) last = capstan::fork_io([] {});
    EXPECT_EQ(last, unused);
    while (capstan::state_of(unused) != capstan::thread_state::finished) capstan::yield();
    EXPECT_NO_THROW(capstan::kill_thread(unused));  // a finished thread: nothing to do
  });
}

}  // namespace
