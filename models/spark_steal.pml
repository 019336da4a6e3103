/* spark_steal.pml - stealing sparks by request, and completing a stolen
 * spark whose maker waits for it.
 *
 * Mirrors Note [Spark pools] in rts/sparks/pool.cpp (ask, spark_respond,
 * take_oldest, find_spark, remove_spark; poll_spark_requests in
 * rts/sparks/pool.hpp) and Note [Completing a stolen spark] in
 * rts/sparks/sparks.cpp (complete, wait_stolen, spark_force_slow, the
 * spark thread's loop), with the maker parking as in Note [Blocking on an
 * MVar] (the spark's lock released by the landing side).
 *
 * Parties: victim V owns a pool with two sparks and forces them with
 * get(), oldest first, polling for requests at its poll points (each slow
 * get(), and every turn of its idle loop afterwards, until it goes to
 * sleep); two idle thieves T1, T2 each ask V for sparks (at most two asks
 * each) and run what they get on a spark thread, completing it.  A thief
 * may give up waiting at any moment (its deadline, or work in its inbox)
 * and withdraws its request.
 *
 * Abstractions.  The pool is a set of spark ids (take_oldest takes the
 * lowest); with two sparks an answer's batch (a quarter of the rest) is
 * always empty, so steal_batch is left out - it is written before the same
 * release store of steal_box that the model keeps.  A thief asks only
 * while V's pool looks non-empty (the relaxed size() hint).  Running a
 * spark is counting it.  The maker's park is two steps: the context saved,
 * then the landing side's unlock of the spark lock.
 *
 * Memory model: sequential consistency.  The request word is only ever
 * changed by RMWs (the thief's CASes, the owner's exchange) and the spark
 * state by the thief's exchange and the maker's CAS: RMWs on one location
 * are totally ordered in every C++ execution, and that order is all the
 * Note's arguments use ("exactly one of ... wins").  steal_box is a flag
 * the thief polls until it is set (release/acquire publishes the spark's
 * fields); no argument here needs a store to be ordered before a later
 * load of another location, so no store buffer is modelled.
 *
 * Properties (no lost wake-up, no lost spark): at the end every spark was
 * run exactly once (by V itself or by a thief), V's get() returned for
 * both, no thief waits for an answer and the request word is clear; no
 * invalid end state; and the maker is woken only once parked.
 *
 * Broken variants:
 *   -DBROKEN           the thief withdraws its request with a plain store
 *                      instead of the CAS, and leaves: if the owner took
 *                      the request first, its answer - a spark marked
 *                      stolen - reaches nobody, and V waits for it for ever.
 *   -DBROKEN_COMPLETE  complete() reads the state and then stores `done`
 *                      (no exchange): the maker's CAS to stolen_waiting
 *                      can fall in between, and V sleeps unwoken.
 */

#define NONE      3     /* kNoSpark */
#define NS        2     /* sparks: ids 1 and 2 (0 = null) */
#define V         0
#define T1        1
#define T2        2

#define PENDING         0
#define STOLEN          1
#define STOLEN_WAITING  2
#define DONE            3
#define TAKEN           4

bool inpool[NS + 1];    /* V's pool [owner] */
byte state[NS + 1];     /* spark_base::state */
bool slock[NS + 1];     /* spark_base::lock */
byte runs[NS + 1];      /* ghost: how often each spark ran */
byte request;           /* V's spark_pool::request: a thief, or 0 */
byte steal_box[3];      /* each thief's answer box: 0, a spark, or NONE */
bool v_saved, v_runnable;   /* the maker parked in wait_stolen / woken */
bool v_done;
byte asking;            /* ghost: thieves inside ask() */

#define pool_nonempty (inpool[1] || inpool[2])

/* spark_respond (owner V): take the request, answer with the oldest spark. */
inline respond(th, s) {
  atomic { th = request; request = 0 };   /* exchange (acq_rel) */
  if
  :: th != 0 ->
       atomic {
         if
         :: inpool[1] -> s = 1
         :: !inpool[1] && inpool[2] -> s = 2
         :: else -> s = 0
         fi;
         if
         :: s != 0 -> inpool[s] = 0; state[s] = STOLEN   /* take_oldest */
         :: else -> skip
         fi
       };
       if
       :: s != 0 -> steal_box[th] = s    /* release store */
       :: else -> steal_box[th] = NONE
       fi
  :: else -> skip                        /* withdrawn */
  fi;
  th = 0; s = 0
}
/* poll_spark_requests (relaxed peek) */
inline poll(th, s) {
  if
  :: request != 0 -> respond(th, s)
  :: else -> skip
  fi
}

/* The victim: par() made sparks 1 and 2; get() forces them oldest first. */
proctype Victim() {
  byte s, th, x, st;
  s = 1;
  do
  :: s > NS -> break
  :: s <= NS ->
force:
       /* spark_force_slow */
       st = state[s];
       if
       :: st == DONE -> s++
       :: st == STOLEN ->
            /* wait_stolen */
            atomic { !slock[s] -> slock[s] = 1 };
            if
            :: atomic { state[s] == STOLEN -> state[s] = STOLEN_WAITING } ->
                 /* park_current: off the stack, then the lock is released */
                 v_saved = 1;
                 slock[s] = 0;
                 atomic { v_runnable -> v_runnable = 0; v_saved = 0 }
            :: else -> slock[s] = 0     /* already done */
            fi;
            s++
       :: st == PENDING ->
            poll(th, x);                /* a poll point */
            if
            :: state[s] != PENDING -> goto force
            :: else ->
                 inpool[s] = 0;         /* remove_spark: fizzled */
                 state[s] = TAKEN;
                 runs[s]++;
                 state[s] = DONE;
                 s++
            fi
       fi
  od;
  v_done = 1;
  /* idle(): every spin turn polls, until it goes to sleep */
end_idle:
  do
  :: request != 0 -> respond(th, x)
  :: break
  od
}

/* complete(s): publish done; wake the maker if it waits. */
inline complete(s, prev) {
#ifdef BROKEN_COMPLETE
  prev = state[s];
  state[s] = DONE;
#else
  atomic { prev = state[s]; state[s] = DONE }   /* exchange (acq_rel) */
#endif
  if
  :: prev == STOLEN_WAITING ->
       atomic { !slock[s] -> slock[s] = 1 };    /* free once V is parked */
       slock[s] = 0;
       atomic { assert(v_saved && !v_runnable); v_runnable = 1 }   /* wake_home */
  :: else -> skip                               /* the spark may be gone */
  fi
}

/* An idle capability: find_spark asks V (ask()), and a spark thread runs
 * what it got, completes it, and looks again. */
proctype Thief(byte me) {
  byte s, prev, tries;
  tries = 0;
  do
  :: tries == 2 -> break
  :: tries < 2 && !pool_nonempty -> break   /* v->sparks.size() == 0: nobody to ask */
  :: tries < 2 && pool_nonempty ->
       tries++;
       /* ask(me, V) */
       steal_box[me] = 0;
       if
       :: atomic { request == 0 -> request = me; asking++ } ->
            do
            :: steal_box[me] != 0 -> s = steal_box[me]; break
            :: steal_box[me] == 0 ->
                 /* deadline passed, or work in our inbox: withdraw */
#ifdef BROKEN
                 request = 0;
                 s = NONE;
                 break
#else
                 if
                 :: atomic { request == me -> request = 0 } -> s = NONE; break
                 :: else ->
                      /* the owner took the request: its answer comes */
                      (steal_box[me] != 0);
                      s = steal_box[me];
                      break
                 fi
#endif
            od;
            asking--;
            if
            :: s != NONE ->
                 /* the spark thread: run, complete */
                 runs[s]++;
                 complete(s, prev)
            :: else -> skip
            fi
       :: else -> skip            /* someone else is asking V */
       fi
  od
}

active proctype Checker() {
  timeout ->
  assert(v_done);
  assert(runs[1] == 1 && runs[2] == 1);
  assert(state[1] == DONE && state[2] == DONE);
  assert(request == 0 && asking == 0)
}

init {
  atomic {
    inpool[1] = 1; inpool[2] = 1;
    run Victim();
    run Thief(T1);
    run Thief(T2)
  }
}
