// timeout_stress.cpp - random nested timeouts around every kind of wait
// (mvar take, sleep, chan read and read_for, safe calls, masked takes,
// computing with yield points) at -N1/-N2/-N4, while a feeder fills the
// mvar and the chan at random: no timeout_expired escapes the timeout()
// that raised it, none arrives after it returned, and every thread
// finishes.  The mix keeps run queues long, threads returning from safe
// calls and capabilities going idle, which is what made push_work hand
// over a thread still running on its stack (Note [Requeued while still
// running] in rts/schedule/steal.cpp; a SIGSEGV about once in 80 runs at
// -N4 under load).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>

#include "capstan/capstan.hpp"
#include "stress.hpp"

namespace {

using namespace capstan;
using namespace std::chrono_literals;

class TimeoutStress : public ::testing::TestWithParam<unsigned> {};

INSTANTIATE_TEST_SUITE_P(, TimeoutStress, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

std::atomic<std::uint64_t> next_seed{0};

TEST_P(TimeoutStress, NestedTimeoutsAroundEveryKindOfWait) {
  stress::Watchdog dog(std::chrono::seconds(120), "nested timeouts");
  std::atomic<int> escaped{0}, late{0}, fired{0}, finished{0};
  capstan::run(capstan_test::opts(GetParam()), [&] {
    constexpr int kThreads = 24;
    mvar<int> box;
    chan<int> items;
    std::atomic<bool> stop{false};
    mvar<int> feeder_done;
    fork_io([&] {
      std::mt19937_64 r(stress::seed() + next_seed.fetch_add(1));
      while (!stop.load()) {
        if (r() % 2) box.try_put(1);
        else items.write(1);
        sleep_for(std::chrono::microseconds(r() % 500));
      }
      feeder_done.put(1);
    });
    mvar<int> done;
    for (int k = 0; k < kThreads; ++k) {
      fork_io([&] {
        std::mt19937_64 r(stress::seed() + next_seed.fetch_add(1));
        auto op = [&](int which) {
          switch (which) {
            case 0: (void)box.take(); break;
            case 1: sleep_for(std::chrono::microseconds(r() % 3000)); break;
            case 2: for (int i = 0; i < 100; ++i) yield(); break;
            case 3: (void)items.read(); break;
            case 4: safe_call([&] { ::usleep(static_cast<useconds_t>(r() % 2000)); }); break;
            case 5: (void)items.read_for(std::chrono::microseconds(r() % 3000)); break;
            case 6: mask([&] { (void)box.take(); }); break;
            default: capstan_test::busy_work(static_cast<long>(r() % 3000)); yield_point(); break;
          }
        };
        for (int it = 0; it < 150; ++it) {
          try {
            auto d1 = std::chrono::microseconds(r() % 4000);
            auto d2 = std::chrono::microseconds(r() % 4000);
            int depth = static_cast<int>(r() % 3);
            int w1 = static_cast<int>(r() % 8), w2 = static_cast<int>(r() % 8);
            bool ok;
            if (depth == 0) {
              ok = timeout(d1, [&] { op(w1); });
            } else if (depth == 1) {
              ok = timeout(d1, [&] {
                bool in = timeout(d2, [&] { op(w1); });
                (void)in;
                op(w2);
              });
            } else {
              ok = timeout(d1, [&] {
                (void)timeout(d2, [&] { (void)timeout(d1 / 2, [&] { op(w1); }); op(w2); });
              });
            }
            if (!ok) fired.fetch_add(1);
          } catch (const timeout_expired&) {
            escaped.fetch_add(1);
          }
          try {
            yield();  // a late time-out would land here
          } catch (const timeout_expired&) {
            late.fetch_add(1);
          }
        }
        finished.fetch_add(1);
        done.put(1);
      });
    }
    for (int k = 0; k < kThreads; ++k) done.take();
    stop = true;
    feeder_done.take();
  });
  EXPECT_EQ(escaped.load(), 0);
  EXPECT_EQ(late.load(), 0);
  EXPECT_EQ(finished.load(), 24);
  EXPECT_GT(fired.load(), 0);
}

}  // namespace
