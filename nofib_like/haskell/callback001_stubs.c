/* callback001_stubs.c - the C side of haskell/callback001.hs: starts
 * `threads` pthreads, each calling the foreign-exported Haskell function
 * capstan_bench_incall n times (GHC in-calls: rts_lock / rts_evalIO /
 * rts_unlock), joins them and returns the sum of all results; *elapsed_ns
 * gets the time from before the first pthread_create to after the last join. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "HsFFI.h"

extern HsInt capstan_bench_incall(HsInt x); /* foreign export in callback001.hs */
HsInt capstan_bench_callback001(HsInt threads, HsInt n, HsWord64* elapsed_ns);

struct job {
  HsInt n;
  HsInt sum;
};

static void* worker(void* p) {
  struct job* j = p;
  HsInt s = 0;
  for (HsInt i = 0; i < j->n; ++i) s += capstan_bench_incall(i);
  j->sum = s;
  return NULL;
}

static HsWord64 now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (HsWord64)ts.tv_sec * 1000000000u + (HsWord64)ts.tv_nsec;
}

HsInt capstan_bench_callback001(HsInt threads, HsInt n, HsWord64* elapsed_ns) {
  pthread_t* tid = calloc((size_t)threads, sizeof *tid);
  struct job* jobs = calloc((size_t)threads, sizeof *jobs);
  HsWord64 t0 = now_ns();
  for (HsInt t = 0; t < threads; ++t) {
    jobs[t].n = n;
    if (pthread_create(&tid[t], NULL, worker, &jobs[t]) != 0) abort();
  }
  HsInt sum = 0;
  for (HsInt t = 0; t < threads; ++t) {
    pthread_join(tid[t], NULL);
    sum += jobs[t].sum;
  }
  *elapsed_ns = now_ns() - t0;
  free(tid);
  free(jobs);
  return sum;
}
