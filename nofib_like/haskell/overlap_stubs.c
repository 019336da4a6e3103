/* overlap_stubs.c - the blocking call of haskell/overlap.hs: sleeps for ns
 * nanoseconds in the OS and returns CLOCK_MONOTONIC (the clock of GHC's
 * getMonotonicTimeNSec) right before returning. */
#include <stdint.h>
#include <time.h>

uint64_t capstan_bench_sleep_ns(uint64_t ns);

uint64_t capstan_bench_sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
