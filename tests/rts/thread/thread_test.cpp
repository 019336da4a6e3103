// thread_test.cpp - green threads: identity, labels, per-thread state that
// must survive switches and migration, errors, and scale.
#include <cerrno>
#include <cfenv>
#if defined(__x86_64__)
#include <fpu_control.h>
#include <xmmintrin.h>
#endif
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::WithCaps;

class Threads : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Threads);

TEST_P(Threads, IdsAreUniqueAndSelfKnowsItsOwn) {
  constexpr int kThreads = 500;
  std::vector<capstan::thread_id> forked(kThreads), seen(kThreads);
  run([&] {
    capstan::mvar<int> done;
    for (int i = 0; i < kThreads; ++i)
      forked[i] = capstan::fork_io([&, i] {
        seen[i] = capstan::self();
        done.put(i);
      });
    for (int i = 0; i < kThreads; ++i) done.take();
    EXPECT_EQ(capstan::num_capabilities(), caps());
  });
  std::set<capstan::thread_id> unique(forked.begin(), forked.end());
  EXPECT_EQ(unique.size(), static_cast<std::size_t>(kThreads));
  EXPECT_EQ(forked, seen);
  EXPECT_EQ(std::hash<capstan::thread_id>{}(forked[0]), std::hash<std::uint64_t>{}(forked[0].value()));
  EXPECT_EQ(fmt::format("{}", forked[0]), std::to_string(forked[0].value()));
}

TEST_P(Threads, ForkOnRunsOnTheNamedCapabilityAndStaysThere) {
  run([&] {
    capstan::mvar<bool> done;
    for (unsigned c = 0; c < caps(); ++c) {
      capstan::fork_on(c, [&, c] {
        bool ok = true;
        for (int i = 0; i < 100; ++i) {
          ok = ok && capstan::current_capability() == c;
          capstan::yield();
        }
        done.put(ok);
      });
    }
    for (unsigned c = 0; c < caps(); ++c) EXPECT_TRUE(done.take());
  });
}

// glibc declares __errno_location() const, so a compiler may keep errno's
// *address* across a call that resumes us on another OS thread (Note [TLS
// across a switch] in rts/task/task.hpp; docs/api.md).  The runtime carries each thread's errno *value*;
// code reads it afresh, as here through non-inlined accessors.
__attribute__((noinline)) void set_errno(int v) { errno = v; }
__attribute__((noinline)) int get_errno() { return errno; }

TEST_P(Threads, ErrnoIsPerThreadAcrossSwitches) {
  run([&] {
    capstan::mvar<bool> done;
    for (int i = 1; i <= 20; ++i) {
      capstan::fork_io([&, i] {
        bool ok = true;
        for (int k = 0; k < 50; ++k) {
          set_errno(i);
          capstan::yield();
          ok = ok && get_errno() == i;
        }
        done.put(ok);
      });
    }
    for (int i = 0; i < 20; ++i) EXPECT_TRUE(done.take());
  });
}

TEST_P(Threads, RoundingModeIsPerThreadAcrossSwitchesAndMigration) {
  run([&] {
    capstan::mvar<bool> done;
    const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO, FE_TONEAREST};
    for (int i = 0; i < 16; ++i) {
      capstan::fork_io([&, i] {
        int mine = modes[i % 4];
        std::fesetround(mine);
        bool ok = true;
        for (int k = 0; k < 50; ++k) {
          capstan::yield();
          ok = ok && std::fegetround() == mine;
        }
        std::fesetround(FE_TONEAREST);
        done.put(ok);
      });
    }
    for (int i = 0; i < 16; ++i) EXPECT_TRUE(done.take());
    EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  });
}

#if defined(__x86_64__)
constexpr unsigned kControl = 0xFFC0;  // MXCSR's control bits (the status flags are 0-5)

// The whole floating-point control state is each thread's, not only the
// rounding mode: MXCSR's flush-to-zero and denormals-are-zero bits, and the
// x87 control word's precision field, which fesetround does not touch.  The
// switch reads MXCSR at its first instruction and compares it at its last
// (rts/asm/switch_x86_64_sysv.S): a slot or offset wrong there would load
// another thread's state, or none.
TEST_P(Threads, FloatingPointControlStateIsPerThreadAcrossSwitchesAndMigration) {
  constexpr unsigned kRounding[] = {_MM_ROUND_NEAREST, _MM_ROUND_DOWN, _MM_ROUND_UP,
                                    _MM_ROUND_TOWARD_ZERO};
  constexpr fpu_control_t kPrecision[] = {_FPU_SINGLE, _FPU_DOUBLE, _FPU_EXTENDED};
  run([&] {
    const unsigned main_csr = _mm_getcsr() & kControl;
    fpu_control_t main_cw;
    _FPU_GETCW(main_cw);
    capstan::mvar<bool> done;
    for (int i = 0; i < 24; ++i) {
      capstan::fork_io([&, i] {
        unsigned mine = (_MM_MASK_MASK | kRounding[i % 4] | (i & 4 ? 0x8000u : 0u) |  // FTZ
                         (i & 8 ? 0x0040u : 0u)) & kControl;                            // DAZ
        _mm_setcsr(mine);
        fpu_control_t cw;
        _FPU_GETCW(cw);
        cw = static_cast<fpu_control_t>((cw & ~_FPU_EXTENDED) | kPrecision[i % 3]);
        _FPU_SETCW(cw);
        bool ok = true;
        for (int k = 0; k < 50; ++k) {
          capstan::yield();
          fpu_control_t now;
          _FPU_GETCW(now);
          ok = ok && (_mm_getcsr() & kControl) == mine && now == cw;
        }
        _mm_setcsr(main_csr);
        _FPU_SETCW(main_cw);
        done.put(ok);
      });
    }
    for (int i = 0; i < 24; ++i) EXPECT_TRUE(done.take()) << "a thread lost its control state";
    fpu_control_t cw;
    _FPU_GETCW(cw);
    EXPECT_EQ(_mm_getcsr() & kControl, main_csr);
    EXPECT_EQ(cw, main_cw);
  });
}

// A thread that finishes leaves through a switch that saves nothing of it
// (capstan_switch_dead in rts/asm): the thread that runs next must still
// get its own control state, not the finished one's.
TEST_P(Threads, AFinishedThreadsControlStateDoesNotFollowIt) {
  run([&] {
    const unsigned main_csr = _mm_getcsr() & kControl;
    fpu_control_t main_cw;
    _FPU_GETCW(main_cw);
    capstan::mvar<bool> done;
    bool ok = true;
    for (int i = 0; i < 200; ++i) {
      capstan::fork_io([&, i] {
        // A fresh thread starts with the defaults, whatever the last one left.
        fpu_control_t cw;
        _FPU_GETCW(cw);
        bool fresh = (_mm_getcsr() & kControl) == 0x1F80u && cw == _FPU_DEFAULT;
        _mm_setcsr(_MM_MASK_MASK | _MM_ROUND_UP | 0x8040u);  // and FTZ, DAZ
        fpu_control_t odd = static_cast<fpu_control_t>((cw & ~_FPU_EXTENDED) | (i % 2 ? _FPU_SINGLE : _FPU_DOUBLE));
        _FPU_SETCW(odd);
        done.put(fresh);  // may switch to main before this thread finishes
      });
      ok = ok && done.take();
      capstan::yield();  // let it finish, here or on another capability
      fpu_control_t cw;
      _FPU_GETCW(cw);
      ok = ok && (_mm_getcsr() & kControl) == main_csr && cw == main_cw;
    }
    EXPECT_TRUE(ok) << "a finished thread's MXCSR or x87 control word reached another thread";
  });
}
#endif

// Switching inside a catch block while other threads throw and catch must
// not corrupt the caught-exception stack (EhGlobals in rts/thread/thread.hpp).
TEST_P(Threads, ExceptionStateSurvivesASwitchInsideACatchBlock) {
  run([&] {
    capstan::mvar<bool> done;
    for (int i = 0; i < 8; ++i) {
      capstan::fork_io([&, i] {
        bool ok = true;
        for (int k = 0; k < 20; ++k) {
          try {
            throw std::runtime_error("thread " + std::to_string(i));
          } catch (const std::runtime_error& e) {
            capstan::yield();  // others throw and catch meanwhile
            ok = ok && std::string(e.what()) == "thread " + std::to_string(i);
            try {
              throw;  // rethrows *our* current exception
            } catch (const std::runtime_error& again) {
              ok = ok && &again == &e;
            }
          }
          ok = ok && std::uncaught_exceptions() == 0;
        }
        done.put(ok);
      });
    }
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(done.take());
  });
}

TEST_P(Threads, UncaughtExceptionEndsOnlyThatThreadAndIsReported) {
  testing::internal::CaptureStderr();
  bool survivor_ran = false;
  run([&] {
    capstan::mvar<int> done, go;
    auto t = capstan::fork_io([&] {
      go.take();
      throw std::runtime_error("boom");
    });
    capstan::label_thread(t, "exploder");
    go.put(1);
    capstan::fork_io([&] {
      for (int i = 0; i < 10; ++i) capstan::yield();
      survivor_ran = true;
      done.put(1);
    });
    done.take();
    for (int i = 0; i < 10; ++i) capstan::yield();
  });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(survivor_ran);
  EXPECT_NE(err.find("capstan: uncaught exception in thread"), std::string::npos) << err;
  EXPECT_NE(err.find("(exploder): boom"), std::string::npos) << err;
  EXPECT_EQ(capstan::statistics().uncaught_exceptions, 1u);
}

TEST_P(Threads, AHundredThousandThreadsAllRun) {
  constexpr int kThreads = 100000 / capstan_test::kScale;
  std::atomic<int> ran{0};
  run([&] {
    capstan::mvar<int> done;
    for (int i = 0; i < kThreads; ++i)
      capstan::fork_io([&] {
        if (ran.fetch_add(1) + 1 == kThreads) done.put(1);
      });
    done.take();
  });
  EXPECT_EQ(ran.load(), kThreads);
  auto s = capstan::statistics();
  EXPECT_EQ(s.threads_created, static_cast<std::uint64_t>(kThreads) + 1);
}

class ThreadsOutsideRun : public capstan_test::RuntimeTest {};

TEST_F(ThreadsOutsideRun, RuntimeCallsFromAPlainOsThreadAreClearErrors) {
  EXPECT_THROW(capstan::self(), capstan::usage_error);
  EXPECT_THROW(capstan::yield(), capstan::usage_error);
  EXPECT_THROW(capstan::current_capability(), capstan::usage_error);
  EXPECT_THROW(capstan::num_capabilities(), capstan::usage_error);
  EXPECT_THROW(capstan::fork_io([] {}), capstan::usage_error);
  try {
    capstan::fork_io([] {});
  } catch (const capstan::usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("capstan::fork_io"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("inside capstan::run"), std::string::npos);
  }
  // ... also while a runtime runs, from an OS thread it does not own.
  run(capstan_test::opts(1), [] {
    std::thread other([] { EXPECT_THROW(capstan::self(), capstan::usage_error); });
    other.join();
  });
}

}  // namespace
