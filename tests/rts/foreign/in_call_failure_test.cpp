// in_call_failure_test.cpp - a call_in whose Task or thread cannot be made
// throws to its caller and is not counted as in progress: the run still
// ends.  The failure is injected (primitives/fault_injection.hpp).  The
// scenario runs in a child process (a death test) with an alarm as the
// failure guard, because the defect it checks for is run() waiting for ever.
#include <unistd.h>

#include <new>
#include <thread>

#include "capstan_test.hpp"
#include "primitives/fault_injection.hpp"

using namespace capstan;
namespace fi = capstan::rts::fault_injection;

namespace {

int incall_that_cannot_start(unsigned caps) {
  return capstan::run(capstan_test::opts(caps), [] {
    bool threw = false;
    int later = 0;
    safe_call([&] {
      std::thread foreign([&] {
        fi::fail_incall_thread.store(0);
        try {
          call_in([] {});
        } catch (const std::bad_alloc&) {
          threw = true;
        }
        later = call_in([] { return 7; });  // the next in-call works
      });
      foreign.join();
    });
    return threw && later == 7 ? 0 : 1;
  });
}

TEST(InCallFailure, AFailedInCallDoesNotKeepRunFromReturning) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (unsigned caps : {1u, 2u}) {
    EXPECT_EXIT(
        {
          alarm(60);  // failure guard: run() never returning kills the child
          std::exit(incall_that_cannot_start(caps));
        },
        ::testing::ExitedWithCode(0), "")
        << "at -N" << caps;
  }
}

}  // namespace
