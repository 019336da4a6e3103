/* capability_handover.pml - a capability released by a safe call, handed to
 * spare Tasks, claimed by senders and the ticker, and the call returning.
 *
 * Mirrors Note [Handing over a capability] in rts/task/handover.cpp
 * (give_capability_to_task, wait_for_capability, try_grab_capability,
 * give_capability_to_spare, become_spare, release_capability,
 * notify_capability), Note [Returning from a safe call], Note [Lazy
 * release] and Note [Deferred hand-off] in rts/foreign/safe_call.cpp
 * (safe_call_enter, safe_call_leave,
 * return_slow), the scheduler loop of rts/schedule/schedule.cpp (Note
 * [Bound threads]: bound_next, pick in rts/schedule/pick.hpp),
 * after_switch's migrant push in rts/schedule/switch.hpp, the ticker's
 * sweep of free capabilities in rts/runtime/ticker.cpp, idle()'s sleep
 * hand-shake (Note [Sleeping capabilities], modelled in full in
 * capability_sleep.pml) and Note [Sticky wake-up] (rts/primitives/parker.hpp).
 *
 * Parties, on one capability C:
 *  - Task A (task 0) holds C and runs thread M, which makes one safe call.
 *    M is bound to A (a fork_os thread: when it finishes, A gives C up with
 *    release_capability and leaves) or unbound (it returns through A's
 *    scheduler context, which queues it on C's inbox; A becomes a spare);
 *    the foreign call returns at once or only after W has run (it reads
 *    from a pipe W writes): nondeterministic choices.
 *  - a sender on another capability pushes thread W to C's inbox and
 *    calls notify_capability(C);
 *  - spare Tasks: task 1 is parked as C's spare at the start; more are
 *    started (run) when give_capability_to_spare finds none - or the OS
 *    refuses the start, at most twice in a run (Note [No OS thread for a
 *    spare]): then the giver hands C to a returning bound M's Task, or
 *    releases C with the work queued as a deferred call and makes the
 *    ticker watch it, re-checking the inbox once after the release;
 *  - the ticker: every tick it claims a free capability whose inbox is
 *    non-empty and gives it to a spare; while watching deferred calls
 *    (Ticker::watch_deferred_calls) it claims a capability released by a
 *    deferred call that still has work waiting, and it may stop watching
 *    at any moment (after its quiet polls), re-checking the capabilities;
 *  - shutdown: once W ran and M finished, rt.stop = true and every Task is
 *    unparked.
 *
 * Abstractions.  The inbox and the run queue are two flags each (W, M);
 * draining moves both; a returning M goes to the front.  The holder's
 * loop is its scheduling decisions: a running thread reaches its next
 * safe point (where kReturning sends it to the scheduler) in finite time,
 * so the holder is modelled as deciding again after each thread.  Running W or
 * finishing M is setting a flag.  The holder's idle() is the sleep
 * hand-shake without the spin phase and sparks.  The spare list is a set.
 * running_task is read and written sequentially consistently: a stale read
 * only unparks a Task that re-checks `given` (or its inbox) and parks again,
 * as the sticky Parker and wait_for_capability's loop allow.  A tick is a
 * step the ticker may take at any moment while the condition it tests
 * holds (it ticks while any capability is busy or free, Note [Lazy
 * release]).
 *
 * Memory model.  Each Task's stores to `hold` go through a one-entry
 * store buffer (TSO) drained by a separate process at any moment: the
 * release store of Note [Lazy release] and the relaxed `held` after a
 * wake-up wait there; seq_cst stores (release_capability's `free`,
 * idle()'s `sleeping`) drain it first and write memory; the CASes
 * (try_grab_capability) drain it and act on memory.  As in
 * capability_sleep.pml, store buffering is the one reordering the Dekker
 * hand-shakes depend on; `given` is a release/acquire flag read in a loop
 * with a sticky Parker, which needs no store-load order.
 *
 * Properties.
 *  1. No lost wake-up: in every interleaving W runs, M finishes, every
 *     Task leaves and nothing is stuck (invalid end states, and the
 *     assertion at timeout), provided the OS gives threads in the end
 *     (init's first choice: it refuses at most two starts).
 *  2. The ticker is needed only for Note [Lazy release] and Note
 *     [Deferred hand-off]: when it claims C, either C's latest release was
 *     the lazy or a deferred one, or some party that will claim C itself is
 *     still on its way (a sender between its push and the end of
 *     notify_capability, a releaser between its store and its re-check).
 *     Work stranded after release_capability is a bug.
 *  3. A deferred call is never left unwatched: while C is free after a
 *     deferred release with work waiting, the ticker is watching, unless
 *     the caller is between its release and its look at `watching`, or the
 *     ticker between stopping and its re-check (the hand-shake next to
 *     Ticker::watch_deferred_calls in rts/runtime/ticker.cpp).  The model
 *     leaves out the once-a-tick backstop that would repair a miss.
 *  4. While the OS refuses every start for good (init's other choice), a
 *     returning bound M still gets C back: only W may be left unrun, when
 *     no Task is left to run it (A's call waits for it, or A has left).
 *
 * Broken variants:
 *   -DBROKEN         release_capability without its re-check of the inbox
 *                    after storing `free`: the ticker must rescue a thread
 *                    stranded by a seq_cst release (property 2 fails).
 *   -DBROKEN_FENCE   release_capability's store of `free` is a release
 *                    store: it waits in the store buffer while the re-check
 *                    and the sender's load of `hold` both miss (property 2).
 *   -DBROKEN_TICKER  the ticker's sweep of free capabilities is removed:
 *                    the Lazy release window strands W while the call waits for
 *                    W: a deadlock (property 1).
 *   -DBROKEN_WATCH   the ticker stops watching without re-checking the
 *                    capabilities: a deferred call released just before is
 *                    left unwatched (property 3).
 *   -DBROKEN_STRAND  a refused spare start releases C without making the
 *                    ticker watch it: the queued work is left unwatched
 *                    (property 3).
 *   -DBROKEN_BOUND   a refused spare start never hands C to a returning
 *                    bound M's Task: while the OS refuses for good, M
 *                    waits for ever although its Task could run it
 *                    (property 4).
 */

#define HELD     0
#define SLEEPING 1
#define FREE     2
#define A        0      /* the Task whose thread M makes the safe call */
#define NTASK    4      /* A, the first spare, and up to two started later */
#define NOBUF    NTASK  /* senders and the ticker store `hold` only by CAS */

byte hold = HELD;              /* Capability::hold, as memory holds it      */
bool sb_full[NTASK + 1];       /* each Task's store buffer for `hold`       */
byte sb_val[NTASK + 1];
byte running_task = A;         /* Capability::running_task                  */
bit  parker[NTASK];            /* Task::parker's sticky word                */
bool given[NTASK];             /* Task::given                               */
bool spare[NTASK];             /* Capability::spares (a set)                */
bool started[NTASK];           /* the Task's OS thread exists               */
bool in_W, in_M;               /* C's inbox: W (sent), M (returning)        */
bool rq_W, rq_M;               /* C's run queue [owner]                     */
bool bound_next;               /* cap->bound_next == M [owner]              */
bool m_bound;                  /* M is bound to A                           */
bool call_waits;               /* M's foreign call returns only after W ran */
bool w_ran, m_done, a_left;
bool stop;                     /* rt.stop                                   */
byte inflight;                 /* ghost: parties that will still claim C    */
bool lazy;                     /* ghost: C's latest release was the lazy one */
bool deferred;                 /* ghost: ... a deferred one (deferred_calls)  */
bool watching;                 /* Ticker::watching_ (seq_cst)               */
bool deferring;                /* ghost: caller between release and watch   */
bool unwatching;               /* ghost: ticker between stop and re-check   */
byte refusals;                 /* spare starts the OS may still refuse      */
bool os_never_relents;         /* refusals is unbounded (init's choice)     */
byte retries = 3;              /* ghost: the ticker's grabs while the OS
                                  never relents and no other party moves
                                  (a push or a Task becoming a spare gives
                                  it three more): unbounded, the ticker
                                  could retry a stuck capability for ever,
                                  a livelock that a safety search does not
                                  see; bounded, it stops, the run times out,
                                  and the Checker looks */

#define inbox_nonempty (in_W || in_M)
#define work_waits (rq_W || rq_M || inbox_nonempty)

/* A relaxed/release store of `hold` by task me: into its buffer. */
inline store_buffered(me, v) {
  atomic { !sb_full[me] -> sb_full[me] = 1; sb_val[me] = v }
}
/* A seq_cst store: drains the buffer, then writes memory. */
inline store_seq_cst(me, v) {
  atomic { !sb_full[me] -> hold = v }
}
/* try_grab_capability: the CAS free -> held (drains the buffer first). */
inline try_grab(me, ok) {
  atomic {
    !sb_full[me] ->
    if
    :: hold == FREE -> hold = HELD; ok = 1; deferred = 0
    :: else -> ok = 0
    fi
  }
}
/* TSO keeps a Task's stores in order: a store or RMW after a buffered
 * store of `hold` waits for it to drain (every publishing write below:
 * `given`, the spare list's lock, the Parker's exchange). */
inline drained(me) {
  !sb_full[me]
}
/* Parker::park (an exchange: drains the buffer) / unpark. */
inline park(me) {
  atomic { !sb_full[me] && parker[me] == 1 -> parker[me] = 0 }
}
inline unpark(t) {
  parker[t] = 1
}

/* give_capability_to_task(to, C, first): running_task, given (release),
 * unpark.  A Task not started yet is started with `given` already set. */
inline give_to_task(me, to) {
  drained(me);
  running_task = to;
  given[to] = 1;
  if
  :: !started[to] -> started[to] = 1; run Task(to)
  :: else -> unpark(to)
  fi
}
/* The ticker is made to watch (watch_deferred_calls); ends `deferring`. */
inline watch() {
  atomic {
    if
    :: !watching -> watching = 1
    :: else -> skip
    fi;
    deferring = 0
  }
}
/* drain_inbox: both flags move to the run queue. */
inline drain() {
  atomic { rq_W = rq_W || in_W; rq_M = rq_M || in_M; in_W = 0; in_M = 0 }
}
/* strand (Note [No OS thread for a spare]): a refused start.  me holds C.
 * hand_to_bound: a returning bound M (queued only by A's return_slow,
 * which then waits for `given`) goes to A with C - A itself may be the
 * giver, in return_slow's notify.
 * Else a seq_cst release as a deferred call, one re-check of the inbox,
 * and the watch. */
inline strand(me, ok) {
  drain();
  if
#ifndef BROKEN_BOUND
  :: rq_M && m_bound -> rq_M = 0; give_to_task(me, A)
#endif
  :: else ->
       atomic { !sb_full[me] -> hold = FREE; lazy = 0; deferred = 1; deferring = 1 };
       if
       :: inbox_nonempty ->              /* nonempty_seq_cst */
            try_grab(me, ok);
            if
            :: ok ->
                 deferring = 0;
                 drain();
                 if
#ifndef BROKEN_BOUND
                 :: rq_M && m_bound -> rq_M = 0; give_to_task(me, A)
#endif
                 :: else ->
                      atomic { !sb_full[me] -> hold = FREE; lazy = 0; deferred = 1; deferring = 1 };
#ifndef BROKEN_STRAND
                      watch()
#else
                      deferring = 0
#endif
                 fi
            :: else ->
#ifndef BROKEN_STRAND
                 watch()
#else
                 deferring = 0
#endif
            fi
       :: else ->
#ifndef BROKEN_STRAND
            watch()
#else
            deferring = 0
#endif
       fi
  fi
}
/* give_capability_to_spare(C): pop a spare, or start a new Task - which
 * the OS may refuse. */
inline give_to_spare(me, t, ok) {
  drained(me);
  atomic {
    t = 0;
    do
    :: t < NTASK && spare[t] -> spare[t] = 0; break
    :: t < NTASK && !spare[t] -> t++
    :: t == NTASK -> break
    od;
    if
    :: t == NTASK ->   /* none: new_task(worker) */
         t = 1;
         do
         :: t < NTASK && started[t] -> t++
         :: t < NTASK && !started[t] -> break
         :: t == NTASK -> assert(false)   /* NTASK too small for this model */
         od;
         if
         :: os_never_relents -> t = NTASK           /* refused */
         :: !os_never_relents && refusals > 0 -> refusals--; t = NTASK
         :: !os_never_relents -> skip
         fi
    :: else -> skip
    fi
  };
  if
  :: t == NTASK -> strand(me, ok)
  :: else -> give_to_task(me, t)
  fi
}
/* notify_capability(C) by a party that pushed (inflight counted it). */
inline notify(me, t, ok) {
  if
  :: hold == SLEEPING -> t = running_task; unpark(t); inflight--
  :: hold == FREE ->
       try_grab(NOBUF, ok);
       inflight--;
       if
       :: ok -> give_to_spare(me, t, ok)
       :: else -> skip
       fi
  :: hold == HELD -> inflight--
  fi
}

active proctype StoreBuffer() {
  byte i;
end:
  do
  :: atomic {
       (sb_full[0] || sb_full[1] || sb_full[2] || sb_full[3]) ->
       i = 0;
       do
       :: i < NTASK && sb_full[i] -> hold = sb_val[i]; sb_full[i] = 0; break
       :: i < NTASK && !sb_full[i] -> i++
       :: i == NTASK -> break
       od;
       i = 0
     }
  od
}

/* Every Task: A starts holding C and running M; the others start as spares
 * waiting in wait_for_capability. */
proctype Task(byte me) {
  bool ok;
  byte t;
  if
  :: me == A -> goto run_m
  :: else -> goto wait_cap
  fi;

run_m:
  /* --- safe_call_enter (M runs on A, holding C) --- */
  if
  :: rq_W || rq_M || inbox_nonempty ->   /* has_work (relaxed peek) */
       /* Note [Deferred hand-off]: a seq_cst release, then make sure the
        * ticker watches (watch_deferred_calls: seq_cst load, store). */
       atomic { !sb_full[me] -> hold = FREE; lazy = 0; deferred = 1; deferring = 1 };
       atomic {
         if
         :: !watching -> watching = 1
         :: else -> skip
         fi;
         deferring = 0
       }
  :: else ->
       /* Lazy release: Note [Lazy release]: a release store. */
       atomic { !sb_full[me] -> sb_full[me] = 1; sb_val[me] = FREE; lazy = 1 };
       if
       :: inbox_nonempty ->              /* maybe_nonempty (relaxed) */
            try_grab(me, ok);
            if
            :: ok -> lazy = 0; give_to_spare(me, t, ok)
            :: else -> skip
            fi
       :: else -> skip
       fi
  fi;
  /* ... the foreign call runs; it may wait for W (a read from a pipe
   * that W writes): a capability released for it must not keep W. */
  (!call_waits || w_ran);
  /* --- safe_call_leave --- */
  try_grab(me, ok);
  if
  :: ok ->
       running_task = me;               /* take_capability */
       goto m_runs
  :: else -> skip
  fi;
  /* return_slow */
  if
  :: m_bound ->
       atomic { in_M = 1; inflight++; retries = 3 }  /* inbox.push (seq_cst CAS) */
       notify(me, t, ok);
       /* wait_for_capability */
       do
       :: given[me] -> break
       :: else ->
            assert(!stop);              /* return_slow aborts: impossible */
            park(me)
       od;
       given[me] = 0;
       goto m_runs
  :: else ->
       /* switch_to_scheduler_capless; after_switch pushes M (migrant,
        * returning) and notifies; A's scheduler is capless: a spare. */
       atomic { in_M = 1; inflight++; retries = 3 }
       notify(me, t, ok);
       atomic { drained(me) -> spare[me] = 1; retries = 3 }  /* become_spare */
       goto wait_cap
  fi;

m_runs:
  /* M continues on A and finishes.  Unbound, A's scheduler goes on; bound
   * (a fork_os thread), A leaves schedule() through release_capability. */
  m_done = 1;
  if
  :: !m_bound -> goto sched
  :: else -> skip
  fi;
  /* release_capability: drain_inbox, then a bound front (none here), then: */
  atomic { rq_W = rq_W || in_W; rq_M = rq_M || in_M; in_W = 0; in_M = 0 }
  if
  :: rq_W || rq_M ->                    /* has_work */
       give_to_spare(me, t, ok)
  :: else ->
#ifdef BROKEN_FENCE
       atomic { !sb_full[me] -> sb_full[me] = 1; sb_val[me] = FREE; lazy = 0; deferred = 0; inflight++ };
#else
       atomic { !sb_full[me] -> hold = FREE; lazy = 0; deferred = 0; inflight++ };
#endif
#ifndef BROKEN
       if
       :: inbox_nonempty ->             /* nonempty_seq_cst */
            try_grab(me, ok);
            inflight--;
            if
            :: ok -> give_to_spare(me, t, ok)
            :: else -> skip
            fi
       :: else -> inflight--
       fi
#else
       inflight--
#endif
  fi;
  a_left = 1;
  goto done;

wait_cap:
  /* wait_for_capability */
  do
  :: given[me] -> break
  :: else ->
       if
       :: stop -> goto done
       :: else -> park(me)
       fi
  od;
  given[me] = 0;
  /* (take_capability: running_task was set by the giver) */

sched:
  /* The scheduler loop of schedule.cpp, holding C. */
  if
  :: bound_next ->
       bound_next = 0;
       give_to_task(me, A);             /* give_capability_to_task(M's Task) */
       atomic { drained(me) -> spare[me] = 1; retries = 3 }  /* capless worker: become_spare */
       goto wait_cap
  :: else -> skip
  fi;
  /* pick: nothing once stopped; else drain_inbox and pop the front */
  if
  :: stop -> goto done
  :: else -> skip
  fi;
  atomic { rq_W = rq_W || in_W; rq_M = rq_M || in_M; in_W = 0; in_M = 0 }
  if
  :: rq_M ->
       rq_M = 0;
       if
       :: m_bound -> bound_next = 1     /* another Task's bound thread */
       :: else -> m_done = 1            /* the unbound M runs here and ends */
       fi;
       goto sched
  :: !rq_M && rq_W -> rq_W = 0; w_ran = 1; goto sched
  :: else -> skip
  fi;
  /* idle(): the sleep hand-shake (capability_sleep.pml) */
  store_seq_cst(me, SLEEPING);
  if
  :: inbox_nonempty || stop -> store_buffered(me, HELD); goto sched
  :: else -> skip
  fi;
  park(me);
  store_buffered(me, HELD);
  goto sched;

done:
  skip
}

active proctype Sender() {
  bool ok;
  byte t;
  atomic { in_W = 1; inflight++; retries = 3 }       /* inbox.push (seq_cst CAS) */
  notify(NOBUF, t, ok)
}

active proctype Ticker() {
  bool ok;
  byte t;
  do
  :: stop -> break
#ifndef BROKEN_TICKER
  :: atomic {
       hold == FREE && inbox_nonempty &&  /* its two seq_cst loads */
       (!os_never_relents || retries > 0) ->
       if :: os_never_relents -> retries-- :: else -> skip fi;
       /* Property 2: work waits at a free capability that nobody else
        * will claim only in the lazy release's window, or behind a
        * deferred call. */
       assert(lazy || deferred || inflight > 0)
     };
     try_grab(NOBUF, ok);
     if
     :: ok -> give_to_spare(NOBUF, t, ok)
     :: else -> skip
     fi
#endif
  :: atomic {
       watching && hold == FREE && deferred && work_waits &&   /* a poll */
       (!os_never_relents || retries > 0) ->
       if :: os_never_relents -> retries-- :: else -> skip fi
     };
     try_grab(NOBUF, ok);
     if
     :: ok -> give_to_spare(NOBUF, t, ok)
     :: else -> skip
     fi
  /* Quiet polls.  While the OS never relents, not with work waiting at a
   * free C: the re-check would watch again at once, a stutter that
   * would cycle for ever. */
  :: atomic {
       watching && !(os_never_relents && hold == FREE && work_waits) ->
       watching = 0; unwatching = 1
     };
#ifndef BROKEN_WATCH
     atomic {
       if
       :: hold == FREE && work_waits -> watching = 1   /* free_with_work */
       :: else -> skip
       fi
     };
#endif
     unwatching = 0
  od
}

/* Property 3, checked at every step. */
active proctype WatchMonitor() {
end:
  atomic {
    hold == FREE && deferred && work_waits && !watching && !deferring && !unwatching ->
    assert(false)
  }
}

/* shutdown_protocol: once every thread finished (and no safe call is in
 * progress), rt.stop = true and every Task is unparked. */
active proctype Shutdown() {
  byte i;
  (w_ran && m_done && (a_left || !m_bound));
  stop = 1;
  atomic {
    i = 0;
    do
    :: i < NTASK -> parker[i] = 1; i++
    :: else -> break
    od
  }
}

/* Property 1; and 4: while the OS refuses every start for good, only W
 * may be left unrun (no Task can run it once A's call waits for it, or A
 * has left): M, whose Task exists, always gets C back. */
active proctype Checker() {
  timeout ->
  if
  :: !os_never_relents -> assert(w_ran && m_done && stop)
  :: else -> assert(m_done || (call_waits && !w_ran))
  fi
}

init {
  atomic {
    if
    :: m_bound = 1
    :: m_bound = 0
    fi;
    if
    :: call_waits = 1
    :: call_waits = 0
    fi;
    if
    :: refusals = 1
    :: os_never_relents = 1
    fi;
    started[A] = 1;
    run Task(A);
    /* A spare asleep at the start while the OS relents; none while it
     * never does (so that hand-overs need a start, and the refused
     * paths all run; both choices together exceed the search's memory). */
    if
    :: !os_never_relents -> started[1] = 1; spare[1] = 1; run Task(1)
    :: else -> skip
    fi
  }
}
