// parked.hpp - waiting, in a test, for green threads to park in the IO
// manager (rts::io_parked), from a green thread.
//
// The count of a request drops only just after the IO thread has handed
// its thread back (Note [Wake-ups in flight] in rts/io/wake_ups.cpp): a
// thread that has just returned from an IO wait - connect, accept, a
// sleep - and the threads it then wakes or forks may still see that
// request counted for a moment.  So "n requests are parked" proves that
// n new threads have parked only if the count was known to hold none of
// the old ones: a test that did IO waits before it forks the threads it
// will wait for calls parked_drains() first.  (Without it, CloseWakesAThreadBlockedInRead in
// tests/lib/net_test.cpp saw its connect's stale count as the reader's
// park, closed the connection before the reader had started its read, and
// the reader died of EBADF instead of being woken.)
#pragma once

#include <cstddef>

#include "capstan_test.hpp"
#include "io/io_manager.hpp"

namespace capstan_test {

// parked_drains: every wake-up the IO thread had under way has been
// delivered, and nothing else is parked (io_parked() reaches 0); false
// if that did not happen within kWaitGuard.
inline bool parked_drains() {
  return green_wait_until([] { return capstan::rts::io_parked() == 0; });
}

// wait_parked: exactly n requests are parked in the IO manager; false if
// that did not happen within kWaitGuard.  Exactly: a count above n is a
// stale one on its way out, or a test that miscounted.
inline bool wait_parked(std::size_t n) {
  return green_wait_until([n] { return capstan::rts::io_parked() == n; });
}

}  // namespace capstan_test
