/* callback002_stubs.c - the C side of haskell/callback002.hs.  One pthread F
 * does x = capstan_bench_succ(x) n times (a GHC in-call each: the function
 * is foreign-exported by callback002.hs), then n request/answer round trips
 * with a second pthread through a mutex and two condition variables, timing
 * each series.  Returns 1 if both chains ended at x == n. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "HsFFI.h"

extern HsInt capstan_bench_succ(HsInt x); /* foreign export in callback002.hs */
HsInt capstan_bench_callback002(HsInt n, HsWord64* callin_ns, HsWord64* condvar_ns);

static HsWord64 now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (HsWord64)ts.tv_sec * 1000000000u + (HsWord64)ts.tv_nsec;
}

struct pingpong {
  pthread_mutex_t m;
  pthread_cond_t to_echo, to_caller;
  HsInt value;
  int request, answer, quit;
};

static void* echo(void* p) {
  struct pingpong* pp = p;
  pthread_mutex_lock(&pp->m);
  for (;;) {
    while (!pp->request && !pp->quit) pthread_cond_wait(&pp->to_echo, &pp->m);
    if (pp->quit) break;
    pp->request = 0;
    pp->value += 1;
    pp->answer = 1;
    pthread_cond_signal(&pp->to_caller);
  }
  pthread_mutex_unlock(&pp->m);
  return NULL;
}

/* n round trips with an echo thread; returns the final value, *elapsed the ns. */
static HsInt condvar_round_trips(HsInt n, HsWord64* elapsed) {
  struct pingpong pp = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                        PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};
  pthread_t e;
  if (pthread_create(&e, NULL, echo, &pp) != 0) abort();
  HsInt x = 0;
  HsWord64 t0 = now_ns();
  for (HsInt i = 0; i < n; ++i) {
    pthread_mutex_lock(&pp.m);
    pp.value = x;
    pp.request = 1;
    pthread_cond_signal(&pp.to_echo);
    while (!pp.answer) pthread_cond_wait(&pp.to_caller, &pp.m);
    pp.answer = 0;
    x = pp.value;
    pthread_mutex_unlock(&pp.m);
  }
  *elapsed = now_ns() - t0;
  pthread_mutex_lock(&pp.m);
  pp.quit = 1;
  pthread_cond_signal(&pp.to_echo);
  pthread_mutex_unlock(&pp.m);
  pthread_join(e, NULL);
  return x;
}

struct job {
  HsInt n, x_in, x_cv;
  HsWord64 in_ns, cv_ns;
};

static void* foreign(void* p) {
  struct job* j = p;
  HsWord64 ignored;
  for (HsInt i = 0; i < j->n / 10 + 1; ++i) capstan_bench_succ(0); /* warm up */
  HsInt x = 0;
  HsWord64 t0 = now_ns();
  for (HsInt i = 0; i < j->n; ++i) x = capstan_bench_succ(x);
  j->in_ns = now_ns() - t0;
  j->x_in = x;
  condvar_round_trips(j->n / 10 + 1, &ignored); /* warm up */
  j->x_cv = condvar_round_trips(j->n, &j->cv_ns);
  return NULL;
}

HsInt capstan_bench_callback002(HsInt n, HsWord64* callin_ns, HsWord64* condvar_ns) {
  struct job j = {n, 0, 0, 0, 0};
  pthread_t f;
  if (pthread_create(&f, NULL, foreign, &j) != 0) abort();
  pthread_join(f, NULL);
  *callin_ns = j.in_ns;
  *condvar_ns = j.cv_ns;
  return j.x_in == n && j.x_cv == n;
}
