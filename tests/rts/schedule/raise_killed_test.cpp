// raise_killed_test.cpp - a kill raised with one walk of the stack (Note
// [Raising thread_killed in one walk] in rts/schedule/raise_killed.cpp)
// behaves as a C++ throw of thread_killed would: every destructor runs,
// innermost first; the first matching handler takes it, a typed one or
// catch (...), and rethrowing from it works; std::exception handlers are
// passed by; uncaught_exceptions and current_exception say what a throw
// would.
#include <unistd.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"
#include "schedule/raise_killed.hpp"

using namespace capstan;
using capstan_test::WithCaps;
using capstan_test::green_wait_until;

namespace {

class RaiseKilled : public WithCaps {};

// Frames with a destructor each, down to a blocking take.
struct Trail {
  std::vector<int> order;      // destructors, in the order they ran
  std::vector<int> uncaught;   // std::uncaught_exceptions() in each
};

struct Guard {
  Trail* trail;
  int depth;
  ~Guard() {
    trail->order.push_back(depth);
    trail->uncaught.push_back(std::uncaught_exceptions());
  }
};

template <class Bottom>
[[gnu::noinline]] void descend(Trail& trail, int depth, int frames, Bottom& bottom) {
  Guard g{&trail, depth};
  if (depth + 1 < frames)
    descend(trail, depth + 1, frames, bottom);
  else
    bottom();
  asm volatile("" ::: "memory");  // keeps the frame: no tail call
}

TEST_P(RaiseKilled, EveryDestructorRunsInnermostFirstAndTheThreadDies) {
  run([] {
    for (int frames : {1, 3, 8}) {
      mvar<int> never;
      Trail trail;
      auto bottom = [&] { never.take(); };
      thread_id t = fork_io([&] { descend(trail, 0, frames, bottom); });
      ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
      kill_thread(t);
      ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::died; }));
      std::vector<int> expect;
      for (int d = frames - 1; d >= 0; --d) expect.push_back(d);
      EXPECT_EQ(trail.order, expect) << frames << " frames";
      EXPECT_EQ(trail.uncaught, std::vector<int>(static_cast<std::size_t>(frames), 1))
          << "a destructor run by the unwinding sees one uncaught exception";
    }
  });
}

// A typed handler in the thread's own frames takes the kill, after the
// frames below it are unwound, and the thread carries on.
TEST_P(RaiseKilled, AHandlerInTheThreadTakesItAndTheThreadCarriesOn) {
  run([] {
    mvar<int> never, go, after;
    Trail trail;
    std::atomic<int> in_handler{-1};
    std::atomic<bool> current_is_kill{false};
    auto bottom = [&] { never.take(); };
    thread_id t = fork_io([&] {
      try {
        descend(trail, 0, 4, bottom);
      } catch (const thread_killed& k) {
        in_handler = std::uncaught_exceptions();
        try {
          std::rethrow_exception(std::current_exception());
        } catch (const thread_killed& again) {
          // The same object: the handler was given its address.
          current_is_kill = &again == &k;
        }
      }
      after.put(go.take() + 1);  // carrying on: blocks, and finishes normally
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(t);
    ASSERT_TRUE(green_wait_until([&] { return go.waiting() == 1; }));
    EXPECT_EQ(trail.order, (std::vector<int>{3, 2, 1, 0}));
    EXPECT_EQ(in_handler.load(), 0) << "the handler's body sees no uncaught exception";
    EXPECT_TRUE(current_is_kill.load());
    go.put(41);
    EXPECT_EQ(after.take(), 42);
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::finished; }));
  });
}

// catch (...) takes it too; a rethrow from there reaches the runtime,
// which counts the thread killed; std::exception handlers are passed by.
TEST_P(RaiseKilled, CatchAllRethrowsAndStdExceptionHandlersPassItBy) {
  run([] {
    const auto before = statistics().threads_killed;
    mvar<int> never;
    Trail trail;
    std::atomic<int> catch_all{0}, std_handler{0};
    auto bottom = [&] {
      try {
        never.take();
      } catch (const std::exception&) {
        ++std_handler;
      }
    };
    thread_id t = fork_io([&] {
      try {
        descend(trail, 0, 2, bottom);
      } catch (...) {
        ++catch_all;
        throw;
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(t);
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::died; }));
    EXPECT_EQ(catch_all.load(), 1);
    EXPECT_EQ(std_handler.load(), 0);
    EXPECT_EQ(trail.order, (std::vector<int>{1, 0}));
    EXPECT_EQ(statistics().threads_killed - before, 1u);
  });
}

// A destructor run by the unwinding may throw and catch an exception of
// its own; the kill carries on past it.
TEST_P(RaiseKilled, ADestructorMayThrowAndCatchWhileItUnwinds) {
  run([] {
    mvar<int> never;
    std::atomic<int> inner_caught{0}, seen_uncaught{-1};
    std::atomic<bool> outer_dtor{false};
    struct Outer {
      std::atomic<bool>* f;
      ~Outer() { f->store(true); }
    };
    struct Thrower {
      std::atomic<int>* caught;
      std::atomic<int>* uncaught;
      ~Thrower() {
        uncaught->store(std::uncaught_exceptions());
        try {
          throw std::runtime_error("inside a destructor");
        } catch (const std::runtime_error&) {
          ++*caught;
        }
      }
    };
    thread_id t = fork_io([&] {
      Outer o{&outer_dtor};
      Thrower th{&inner_caught, &seen_uncaught};
      never.take();
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(t);
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::died; }));
    EXPECT_EQ(inner_caught.load(), 1);
    EXPECT_EQ(seen_uncaught.load(), 1);
    EXPECT_TRUE(outer_dtor.load());
  });
}

// An exception_ptr to the kill outlives its handler and rethrows it.
TEST_P(RaiseKilled, AnExceptionPtrToItOutlivesTheHandler) {
  run([] {
    mvar<int> never;
    std::exception_ptr kept;
    thread_id t = fork_io([&] {
      try {
        never.take();
      } catch (...) {
        kept = std::current_exception();
      }
    });
    ASSERT_TRUE(green_wait_until([&] { return never.waiting() == 1; }));
    kill_thread(t);
    ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::finished; }));
    ASSERT_TRUE(kept);
    bool rethrown = false;
    try {
      std::rethrow_exception(kept);
    } catch (const thread_killed&) {
      rethrown = true;
    }
    EXPECT_TRUE(rethrown);
  });
}

// Kills at random depths, half of them taken by a handler at a random
// depth that carries on and blocks again, the rest ending their threads:
// every destructor runs once, every thread's fate is accounted for.
TEST_P(RaiseKilled, RandomDepthsAndHandlers) {
  run([this] {
    std::mt19937 rng(12345u + caps());
    constexpr int kThreads = 64;
    std::atomic<long> dtors{0}, expected_dtors{0}, handled{0};
    struct Count {
      std::atomic<long>* n;
      ~Count() { n->fetch_add(1, std::memory_order_relaxed); }
    };
    std::vector<std::unique_ptr<mvar<int>>> boxes;
    std::vector<thread_id> ids;
    std::vector<int> catches;
    for (int i = 0; i < kThreads; ++i) {
      boxes.push_back(std::make_unique<mvar<int>>());
      const int depth = 1 + static_cast<int>(rng() % 12);
      const int catch_at = (rng() % 2) ? static_cast<int>(rng() % static_cast<unsigned>(depth)) : -1;
      catches.push_back(catch_at);
      // Frames from the handler's down are unwound by the kill; a
      // thread that catches then blocks again and is killed at exit.
      expected_dtors += depth;
      mvar<int>* box = boxes.back().get();
      ids.push_back(fork_io([&, depth, catch_at, box] {
        std::function<void(int)> level;
        auto below = [&](int d) {
          if (d + 1 < depth) level(d + 1); else box->take();
        };
        level = [&](int d) {
          Count c{&dtors};
          if (d != catch_at) return below(d);
          try {
            below(d);
          } catch (const thread_killed&) {
            ++handled;
            box->take();  // killed again, through the frames left
          }
        };
        level(0);
      }));
    }
    ASSERT_TRUE(green_wait_until([&] {
      for (auto& b : boxes) if (b->waiting() != 1) return false;
      return true;
    }));
    for (thread_id t : ids) kill_thread(t);
    int catchers = 0;
    for (int c : catches) catchers += c >= 0;
    ASSERT_TRUE(green_wait_until([&] { return handled.load() == catchers; }));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (catches[i] >= 0) {
        ASSERT_TRUE(green_wait_until([&] { return boxes[i]->waiting() == 1; }));
        EXPECT_EQ(state_of(ids[i]), thread_state::blocked);
      } else {
        ASSERT_TRUE(green_wait_until([&] { return state_of(ids[i]) == thread_state::died; }));
      }
    }
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (catches[i] >= 0) kill_thread(ids[i]);
    ASSERT_TRUE(green_wait_until([&] {
      for (thread_id t : ids) if (state_of(t) != thread_state::died) return false;
      return true;
    }));
    EXPECT_EQ(dtors.load(), expected_dtors.load());
  });
}

// The IO manager's waits raise from the user's frame too (Note [A killed
// IO wait leaves no frame] in rts/io/entry_points.cpp): killed sleepers and
// fd waiters unwind, a thread thrown another exception in an fd wait
// catches it, and each wait's cancel reaches the IO thread (a request that
// leaked would be reported by the leak checker of the ASan suite).
TEST_P(RaiseKilled, KilledOrThrownToInsideIoWaits) {
  run([] {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::atomic<int> dtors{0}, caught{0};
    struct Count {
      std::atomic<int>* n;
      ~Count() { ++*n; }
    };
    thread_id sleeper = fork_io([&] {
      Count c{&dtors};
      sleep_for(std::chrono::hours(1));
    });
    thread_id reader = fork_io([&] {
      Count c{&dtors};
      wait_readable(fds[0]);
    });
    thread_id thrown = fork_io([&] {
      try {
        Count c{&dtors};
        wait_readable(fds[0]);
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "wake up") ++caught;
      }
    });
    for (thread_id t : {sleeper, reader, thrown})
      ASSERT_TRUE(green_wait_until([&] { return state_of(t) == thread_state::blocked; }));
    kill_thread(sleeper);
    kill_thread(reader);
    throw_to(thrown, std::runtime_error("wake up"));
    ASSERT_TRUE(green_wait_until([&] { return state_of(sleeper) == thread_state::died; }));
    ASSERT_TRUE(green_wait_until([&] { return state_of(reader) == thread_state::died; }));
    ASSERT_TRUE(green_wait_until([&] { return state_of(thrown) == thread_state::finished; }));
    EXPECT_EQ(dtors.load(), 3);
    EXPECT_EQ(caught.load(), 1);
    close_fd(fds[0]);  // the IO thread may still be handling the cancels of its waits
    close(fds[1]);
  });
}

CAPSTAN_INSTANTIATE_CAPS(RaiseKilled);

// Outside a green thread raise_killed is an ordinary throw.
TEST(RaiseKilledOutside, OnAPlainOsThreadItIsAnOrdinaryThrow) {
  bool caught = false;
  std::thread([&] {
    try {
      capstan::rts::raise_killed(false);
    } catch (const thread_killed&) {
      caught = std::uncaught_exceptions() == 0;
    }
  }).join();
  EXPECT_TRUE(caught);
}

}  // namespace
