/* capability_sleep.pml - an idle capability going to sleep, and the
 * senders that wake it.
 *
 * Mirrors Note [Sleeping capabilities] in rts/schedule/idle.cpp (idle()),
 * the sender's half notify_capability in rts/task/handover.cpp, the inbox
 * push of rts/capability/inbox.hpp, Note [Sticky wake-up] in
 * rts/primitives/parker.hpp, and Capability::hold / spark_wake in
 * rts/capability/capability.hpp.  Shutdown's half (rt.stop, then every
 * Task unparked) is shutdown_protocol in rts/shutdown/shutdown.cpp.
 *
 * Parties (3 capabilities): capability 0's Task is idle and may sleep;
 * capabilities 1 and 2 each send it one thread (inbox push, then
 * notify_capability); a spark waker (spark_wake_sleeper, or any stale
 * unpark) may unpark the sleeper once; shutdown sets rt.stop once every
 * sent thread has run - as the real shutdown waits for live threads - and
 * unparks every Task.
 *
 * Abstractions.  The inbox is a count (push = the seq_cst CAS, take_all =
 * the exchange); running a drained thread is counting it in `ran`.  The
 * relaxed peeks (inbox_or_stop) read the current value: a peek that reads
 * an older value is the same as a peek made earlier in another
 * interleaving, which the search also covers; and the peek after a
 * wake-up cannot be stale for what the waker published before its unpark
 * (the Parker's release/acquire exchange).  Sparks are left out except spark_wake: an idle
 * capability's own pool is empty (a pool fills only while its owner runs).
 * The Parker is its sticky word: park() = wait until 1, then consume it
 * (the futex re-checks the word atomically, so this is exact).
 *
 * Memory model.  The argument is Dekker's: a store to `hold` then a load
 * of the inbox on one side, a CAS on the inbox then a load of `hold` on
 * the other.  The only reordering that can break that is a store passing a
 * later load (store buffering), so the holder's stores to `hold` go through
 * a one-entry store buffer (TSO, x86's model) that a separate process
 * drains at any moment: a relaxed/release store waits in it, a seq_cst
 * store (xchg on x86, and in C++ a member of the total order S with the
 * sender's seq_cst CAS and load) drains it and writes memory directly.
 * The senders and shutdown store only with RMWs or seq_cst stores, so
 * they need no buffer.  The other C++ reorderings (load-load, store-store)
 * are not what the argument depends on: every other access is an RMW or
 * seq_cst, or only a hint that is re-checked.  A relaxed store
 * hold=held that is still buffered lets a sender read a stale `sleeping`
 * and unpark a Task that is awake: the sticky flag then makes a later
 * park() return at once, which the model covers.
 *
 * Property: no lost wake-up.  Every state in which no process can move
 * (spin's invalid end state / deadlock check) must have every sent thread
 * run and the idle Task gone (shutdown done); parked parties are at end
 * labels only where the wait is legitimately final.  The assertion at
 * `timeout` says the same in words.
 *
 * Broken variants:
 *   -DBROKEN        the re-check of the inbox (and stop) after storing
 *                   `sleeping` is removed: the Task parks with work queued.
 *   -DBROKEN_FENCE  the store of `sleeping` is a release store, not
 *                   seq_cst: it may wait in the store buffer while the
 *                   re-check reads an empty inbox and the sender reads
 *                   `held` - both miss, and the Task sleeps for ever.
 */

#define HELD     0
#define SLEEPING 1
#define NSEND    2

byte hold = HELD;      /* Capability::hold as memory holds it            */
bool sb_full = 0;      /* the idle Task's store buffer for `hold`        */
byte sb_val;
byte inbox = 0;        /* threads pushed to capability 0, not yet taken  */
byte sent = 0;         /* senders done pushing                           */
byte ran = 0;          /* threads capability 0 took from its inbox       */
bool stop = 0;         /* rt.stop                                        */
bit parker = 0;        /* the idle Task's Parker::state_                 */
bool spark_wake = 0;   /* Capability::spark_wake                         */
bool idle_done = 0;

/* A relaxed or release store by the idle Task: into the buffer (after the
 * previous buffered store has drained: FIFO). */
inline store_buffered(v) {
  atomic { !sb_full -> sb_full = 1; sb_val = v }
}
/* A seq_cst store (xchg): drains the buffer, then writes memory. */
inline store_seq_cst(v) {
  atomic { !sb_full -> hold = v }
}

active proctype StoreBuffer() {
end:
  do
  :: atomic { sb_full -> hold = sb_val; sb_full = 0 }
  od
}

/* idle() in rts/schedule/idle.cpp for capability 0, then the scheduler
 * running what it found (drain_inbox), and idling again until stop. */
active proctype IdleTask() {
idle:
  /* Spin phase: relaxed peeks at inbox_or_stop (see the header). */
  if
  :: (inbox > 0 || stop) -> goto found
  :: else -> skip   /* spun kSpinNs without seeing anything */
  fi;
  /* cap->hold.store(Hold::sleeping, seq_cst) */
#ifdef BROKEN_FENCE
  store_buffered(SLEEPING);
#else
  store_seq_cst(SLEEPING);
#endif
#ifndef BROKEN
  /* if (cap->inbox.nonempty_seq_cst() || rt.stop.load(seq_cst)) */
  if
  :: (inbox > 0 || stop) ->
       store_buffered(HELD);   /* hold.store(held, relaxed) */
       goto found
  :: else -> skip
  fi;
#endif
  /* g_spark_sleepers++; if (sparks.size() == 0 && !spark_wake) park() */
  if
  :: !spark_wake ->
sleeping:
       /* Parker::park: an exchange, which drains the store buffer */
       atomic { !sb_full && parker == 1 -> parker = 0 }
  :: else -> skip
  fi;
  store_buffered(HELD);                       /* hold.store(held, relaxed) */
  spark_wake = 0;                             /* relaxed; owner only clears */
  /* found = inbox_or_stop(cap): else spin again */
  if
  :: (inbox > 0 || stop) -> goto found
  :: else -> goto idle
  fi;
found:
  /* The scheduler: drain_inbox (take_all) and run what came; stop ends it. */
  atomic { ran = ran + inbox; inbox = 0 }
  if
  :: stop -> idle_done = 1
  :: else -> goto idle
  fi
}

/* Capabilities 1 and 2: wake(t) / fork onto capability 0: inbox.push(t)
 * (seq_cst CAS), then notify_capability(cap) (seq_cst load of hold). */
active [NSEND] proctype Sender() {
  atomic { inbox++; sent++ }
  if
  :: hold == SLEEPING -> parker = 1   /* running_task->parker.unpark() */
  :: else -> skip                     /* held: its holder sees the inbox */
  fi
}

/* spark_wake_sleeper (sparks/pool.cpp) - or any stale unpark: at most once. */
active proctype SparkWaker() {
  if
  :: atomic { hold == SLEEPING && !spark_wake -> spark_wake = 1 }; parker = 1
  :: skip
  fi
}

/* shutdown_protocol: waits until every thread finished, then
 * rt.stop = true (seq_cst) and unparks every Task. */
active proctype Shutdown() {
  (sent == NSEND && ran == NSEND);
  stop = 1;
  parker = 1
}

active proctype Checker() {
  timeout -> assert(ran == NSEND && idle_done)
}
