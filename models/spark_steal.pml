/* spark_steal.pml - stealing sparks by request, and completing a stolen
 * spark whose maker waits for it, or was interrupted while waiting.
 *
 * Mirrors Note [Spark pools] in rts/sparks/pool.cpp (ask, spark_respond,
 * take_oldest, find_spark, remove_spark; poll_spark_requests in
 * rts/sparks/pool.hpp) and Note [Completing a stolen spark] in
 * rts/sparks/sparks.cpp (complete, gate_wait, wait_stolen,
 * spark_force_slow, spark_discard_slow, the spark thread's loop), with the
 * maker parking at its gate as on an MVar (Note [Blocking on an MVar]: the
 * gate's lock released by the landing side) and an asynchronous exception
 * ending that wait as post_throw does (Note [Raising asynchronously]).
 *
 * Parties: victim V owns a pool with two sparks - both made at the start,
 * or the second made only after it forced the first (par() answers a
 * pending request after its push) - and forces them with get(), oldest
 * first, polling for requests at its poll points (each slow get(), and
 * every turn of its idle loop afterwards, until it goes to sleep); two idle thieves T1, T2 each ask V for sparks (at most two asks
 * each) and run what they get on a spark thread, completing it - or, its
 * spark thread never getting a stack (Note [Running out of stacks] in
 * rts/storage/stack.cpp), give it back to V (give_back: `unpooled`, and V
 * runs it itself after its wait, or discards it).  A thief
 * may give up waiting at any moment (its deadline, or work in its inbox)
 * and withdraws its request.  A thief may also post an early request, the
 * hunt's (Note [Asking before the sparks exist] in rts/sparks/pool.cpp),
 * whether the pool is empty or not; V's poll points answer it only while
 * its pool holds a spark.  An interrupter I may, once, throw to V while
 * V waits interruptibly at a gate (in get()); V then unwinds: it withdraws
 * from the spark, and its sparks' destructors settle both sparks (a
 * pending one is discarded, a stolen one waited for, shielded).
 *
 * Abstractions.  The pool is a set of spark ids (take_oldest takes the
 * lowest); with two sparks an answer's batch (a quarter of the rest) is
 * always empty, so steal_batch is left out - it is written before the same
 * release store of steal_box that the model keeps.  A thief asks
 * (ordinarily) only while V's pool looks non-empty (the relaxed size()
 * hint); an early request it may post at any time.  Running a
 * spark is counting it.  The maker's park is two steps: the context saved,
 * then the landing side's unlock of the gate's lock.  Each spark has its
 * own gate variables; a gate is created (galive) when V starts a wait and
 * destroyed (its destructor takes and drops the lock) when the wait ends.
 * The interrupter holds V's wait_lock implicitly: it acts only while V's
 * wait is published and interruptible, and dequeues V under the gate's
 * lock, as post_throw's try_lock does.
 *
 * Memory model: sequential consistency.  The request word is only ever
 * changed by RMWs (the thief's CASes, the owner's exchange) and the spark
 * state by the thief's exchange and the maker's CASes: RMWs on one
 * location are totally ordered in every C++ execution, and that order is
 * all the Note's arguments use ("exactly one of ... wins").  steal_box is a
 * flag the thief polls until it is set (release/acquire publishes the
 * spark's fields); the gate is guarded by its lock.  No argument here
 * needs a store to be ordered before a later load of another location, so
 * no store buffer is modelled.
 *
 * Properties (no lost wake-up, no lost spark, no touch of a dead gate): at
 * the end every spark was run exactly once or discarded unrun, V finished,
 * no thief waits for an answer and the request word is clear, every gate
 * is gone; no invalid end state; the maker is woken only once parked and
 * once per park; a thief touches a gate only while it lives.
 *
 * Broken variants:
 *   -DBROKEN           the thief withdraws its request with a plain store
 *                      instead of the CAS, and leaves: if the owner took
 *                      the request first, its answer - a spark marked
 *                      stolen - reaches nobody, and V waits for it for ever.
 *   -DBROKEN_COMPLETE  complete() reads the state and then stores `done`
 *                      (no exchange): the maker's CAS to stolen_waiting
 *                      can fall in between, and V sleeps unwoken.
 *   -DBROKEN_WITHDRAW  an interrupted maker withdraws with a load and a
 *                      store instead of the CAS: the thief's exchange can
 *                      fall in between; it then serves a gate the maker
 *                      has left (and destroyed).
 *   -DBROKEN_EARLY     a poll point clears an early request on an empty
 *                      pool instead of leaving it pending: the thief's
 *                      withdrawal CAS fails, and it waits for an answer
 *                      that never comes.
 *   -DBROKEN_LEAVE     an interrupted maker whose withdrawal fails leaves
 *                      at once instead of waiting at the gate for the
 *                      thief: the thief touches a dead gate.
 *   -DBROKEN_GIVEBACK  V, woken at the gate, takes the spark as done
 *                      instead of looking at the state again: a spark
 *                      given back is then never run.
 */

#define NONE      3     /* kNoSpark */
#define NS        2     /* sparks: ids 1 and 2 (0 = null) */
#define V         0
#define T1        1
#define T2        2
#define EARLY     4     /* an early request: the thief's id + EARLY (the low bit of its Capability*) */

#define PENDING         0
#define STOLEN          1
#define STOLEN_WAITING  2
#define DONE            3
#define TAKEN           4
#define UNPOOLED        5   /* given back by a spark thread that never got a stack */

bool inpool[NS + 1];    /* V's pool [owner] */
byte state[NS + 1];     /* spark_base::state */
byte runs[NS + 1];      /* ghost: how often each spark ran */
bool discarded[NS + 1]; /* ghost: destroyed unforced, never run */
/* Each spark's gate while V waits for it (spark_gate): */
bool glock[NS + 1];     /* its mvar_core lock */
bool gq[NS + 1];        /* V's waiter is queued */
bool gcompleted[NS + 1];/* the thief came with nobody queued */
bool galive[NS + 1];    /* ghost: the gate exists (V's frame) */
/* V's wait as post_throw sees it (Thread::blocked_on, waiter::shielded) */
byte v_gate;            /* the gate V is published on, or 0 */
bool v_shielded;
bool v_interrupted;     /* waiter::interrupted: set by I with the wake */
bool thrown;            /* ghost: I has thrown */
byte request;           /* V's spark_pool::request: a thief (+ EARLY), or 0 */
byte steal_box[3];      /* each thief's answer box: 0, a spark, or NONE */
bool v_saved, v_runnable;   /* the maker parked in wait_stolen / woken */
bool v_done;
byte asking;            /* ghost: thieves inside ask() */

#define pool_nonempty (inpool[1] || inpool[2])

/* spark_respond (owner V): take the request, answer with the oldest spark. */
inline respond(th, s) {
  atomic { th = request; request = 0 };   /* exchange (acq_rel) */
  if
  :: th >= EARLY -> th = th - EARLY      /* the thief, untagged */
  :: else -> skip
  fi;
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
/* poll_spark_requests (relaxed peek): an early request waits for a spark */
#define answerable (request != 0 && (request < EARLY || pool_nonempty))
inline poll(th, s) {
  if
  :: answerable -> respond(th, s)
#ifdef BROKEN_EARLY
  :: request >= EARLY && !pool_nonempty -> request = 0   /* dropped, unanswered */
#endif
  :: else -> skip
  fi
}

/* gate_wait (maker V): wait at spark s's gate until the thief came.
 * `shielded`: park_shielded, else park (interruptible: intr tells). */
inline gate_wait(s, shielded, intr) {
  atomic { !glock[s] -> glock[s] = 1 };
  if
  :: gcompleted[s] -> glock[s] = 0
  :: else ->
       gq[s] = 1;
       v_gate = s; v_shielded = shielded;   /* publish_wait */
       /* park_current: off the stack, then the gate's lock is released */
       v_saved = 1;
       glock[s] = 0;
       atomic { v_runnable -> v_runnable = 0; v_saved = 0 };
       intr = v_interrupted;
       v_interrupted = 0
  fi
}

/* wait_stolen (maker V) on spark s: gate creation to destruction. */
inline wait_stolen(s, shielded, intr) {
  galive[s] = 1; gcompleted[s] = 0; gq[s] = 0;
  intr = 0;
  if
  :: atomic { state[s] == STOLEN -> state[s] = STOLEN_WAITING } ->
       gate_wait(s, shielded, intr);
       if
       :: intr ->
            /* withdraw before the gate dies */
#ifdef BROKEN_WITHDRAW
            if
            :: state[s] == STOLEN_WAITING -> state[s] = STOLEN
            :: else -> skip
            fi
#else
            if
            :: atomic { state[s] == STOLEN_WAITING -> state[s] = STOLEN }
            :: else ->
#ifdef BROKEN_LEAVE
                 skip
#else
                 gate_wait(s, 1, x)   /* the thief came first: wait for it */
#endif
            fi
#endif
       :: else -> skip
       fi
  :: else -> skip                      /* already done */
  fi;
  /* ~mvar_core: take and drop the lock; then the frame is gone */
  atomic { !glock[s] -> glock[s] = 1 };
  glock[s] = 0;
  galive[s] = 0
}

/* ~spark while unwinding (spark_discard_slow): settle s without running it
 * here; a stolen one is waited for, shielded. */
inline discard(s, intr) {
  if
  :: state[s] == PENDING -> inpool[s] = 0; discarded[s] = 1; state[s] = DONE
  :: state[s] == STOLEN -> wait_stolen(s, 1, intr)
  :: else -> skip                       /* done, or given back */
  fi;
  /* given back (before, or during the wait): settled unrun (GC'd) */
  if
  :: state[s] == UNPOOLED -> discarded[s] = 1; state[s] = DONE
  :: else -> skip
  fi
}

/* The victim: par() made sparks 1 and 2; get() forces them oldest first.
 * If a get() is interrupted, V unwinds: both sparks' destructors run. */
bool made2;             /* spark 2 exists (made at the start, or by V later) */

proctype Victim() {
  byte s, th, x, st;
  bool intr;
  s = 1;
  do
  :: s > NS -> break
  :: s <= NS ->
       if
       :: s == 2 && !made2 ->
            /* par() makes spark 2 only now, and polls after its push
             * (spark<T>::push): an early request waiting on the empty pool
             * gets it. */
            made2 = 1;
            inpool[2] = 1;
            if
            :: request != 0 -> respond(th, x)
            :: else -> skip
            fi
       :: else -> skip
       fi;
force:
       /* spark_force_slow */
       st = state[s];
       if
       :: st == DONE -> s++
       :: st == STOLEN ->
            wait_stolen(s, 0, intr);
            if
            :: intr ->
                 /* unwinding: the destructors of both sparks */
                 discard(1, x);
                 discard(2, x);
                 break
#ifdef BROKEN_GIVEBACK
            :: else -> if :: state[s] == UNPOOLED -> state[s] = DONE :: else -> skip fi; s++
#else
            :: else -> goto force       /* done, or given back: look again */
#endif
            fi
       :: st == UNPOOLED ->
            runs[s]++;                  /* given back: run here (fizzled) */
            state[s] = DONE;
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
  :: answerable -> respond(th, x)
#ifdef BROKEN_EARLY
  :: request >= EARLY && !pool_nonempty -> request = 0
#endif
  :: break
  od
}

/* The interrupter: throw_to V, once, while V waits interruptibly
 * (post_throw: wait_lock, then try the gate's lock; dequeue, wake). */
proctype Interrupter() {
  byte g;
end_throw:
  atomic {
    !thrown && v_gate != 0 && !v_shielded && gq[v_gate] && !glock[v_gate] ->
      g = v_gate; glock[g] = 1; thrown = 1
  };
  assert(galive[g]);
  gq[g] = 0;                            /* remove: exactly once (under the lock) */
  v_gate = 0;
  v_interrupted = 1;
  glock[g] = 0;
  atomic { assert(v_saved && !v_runnable); v_runnable = 1 }   /* wake */
}

/* complete(s): publish done; serve the maker's gate if it waits. */
inline complete(s, prev) {
#ifdef BROKEN_COMPLETE
  prev = state[s];
  state[s] = DONE;
#else
  atomic { prev = state[s]; state[s] = DONE }   /* exchange (acq_rel) */
#endif
  if
  :: prev == STOLEN_WAITING ->
       atomic { !glock[s] -> assert(galive[s]); glock[s] = 1 };
       if
       :: gq[s] ->
            gq[s] = 0; v_gate = 0;              /* serve: dequeue, clear blocked_on */
            glock[s] = 0;                       /* last touch of gate and spark */
            atomic { assert(v_saved && !v_runnable); v_runnable = 1 }   /* wake_home */
       :: else ->
            gcompleted[s] = 1;
            glock[s] = 0                        /* last touch of gate and spark */
       fi
  :: else -> skip                               /* the spark may be gone */
  fi
}

/* give_back(s): the spark thread never got a stack - publish unpooled and
 * serve the maker's gate if it waits: complete()'s hand-over. */
inline give_back(s, prev) {
  atomic { prev = state[s]; state[s] = UNPOOLED }   /* exchange (acq_rel) */
  if
  :: prev == STOLEN_WAITING ->
       atomic { !glock[s] -> assert(galive[s]); glock[s] = 1 };
       if
       :: gq[s] ->
            gq[s] = 0; v_gate = 0;
            glock[s] = 0;
            atomic { assert(v_saved && !v_runnable); v_runnable = 1 }
       :: else ->
            gcompleted[s] = 1;
            glock[s] = 0
       fi
  :: else -> skip
  fi
}

/* An idle capability: find_spark asks V (ask()), and a spark thread runs
 * what it got, completes it, and looks again - or never starts, and gives
 * it back. */
proctype Thief(byte me) {
  byte s, prev, tries, req;
  tries = 0;
  do
  :: tries == 2 -> break
  :: tries < 2 && !pool_nonempty -> break   /* v->sparks.size() == 0: nobody to ask */
  :: tries < 2 && pool_nonempty -> req = me; goto ask
  :: tries < 2 -> req = me + EARLY; goto ask  /* a hunt's early request, pool empty or not */
  :: false ->
ask:
       tries++;
       /* ask(me, V) */
       steal_box[me] = 0;
       if
       :: atomic { request == 0 -> request = req; asking++ } ->
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
                 :: atomic { request == req -> request = 0 } -> s = NONE; break
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
                 if
                 :: runs[s]++; complete(s, prev)   /* the spark thread: run, complete */
                 :: give_back(s, prev)             /* it never got a stack */
                 fi
            :: else -> skip
            fi
       :: else -> skip            /* someone else is asking V */
       fi
  od
}

active proctype Checker() {
  timeout ->
  assert(v_done);
  assert(runs[1] + discarded[1] == 1 && runs[2] + discarded[2] == 1);
  assert(state[1] == DONE && state[2] == DONE);
  assert(!galive[1] && !galive[2] && !v_saved);
  assert(request == 0 && asking == 0)
}

init {
  atomic {
    inpool[1] = 1;
    /* Both sparks made at the start, or spark 2 only after V forced 1. */
    if
    :: inpool[2] = 1; made2 = 1
    :: skip
    fi;
    run Victim();
    run Thief(T1);
    run Thief(T2);
    run Interrupter()
  }
}
