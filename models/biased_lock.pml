/* biased_lock.pml - an mvar lock biased to the one capability's holder,
 * revoked by other OS threads while the holder goes in and out of it.
 *
 * Mirrors Note [Biased locks] in lib/include/capstan/detail/mvar_core.hpp:
 * mvar_core::lock / enter_biased (the owner's side, inline), lock_slow,
 * try_lock_biased and revoke (rts/mvar/mvar_core.cpp), and unlock.
 *
 * Parties: the capability's holder O, locking the mvar NOPS times (each
 * time through owner_in_ while the state reads biased, else through the
 * shared word with an exchange; unlocking with one store to the word it
 * holds); a revoker R, another OS thread taking
 * the lock once with lock() (revoke: steps 1-4, waiting at step 3); and a
 * second outsider T taking it once with try_lock() (revoke(false): gives up
 * at step 3 and retries, as its callers do).
 *
 * Memory model.  What could break the argument is O's store of
 * owner_in_ = 1 passing its later load of the state (x86's store buffer),
 * so O's stores to owner_in_ go through a FIFO store buffer that a
 * separate process drains (TSO); O's loads read memory.  The outsiders'
 * stores are seq_cst (exchange, or a store that a full fence follows),
 * and so are the exchanges on the shared word: straight to memory, after
 * draining.  membarrier(PRIVATE_EXPEDITED) is one atomic step of a
 * revoker that drains O's whole buffer.  The compiler barrier between the
 * owner's store and its second load keeps program order, which the model
 * has; BROKEN_ORDER takes it away.
 *
 * Property: mutual exclusion - never two holders at once (an assertion as
 * each enters), and every party gets through (the search ends: -DSAFETY
 * with invalid end states reported).
 *
 * Broken variants:
 *   -DBROKEN        the revoker does not wait for owner_in_ (no step 3):
 *                   it takes the shared word while O is inside.
 *   -DBROKEN_FENCE  no membarrier: O's owner_in_ = 1 waits in its buffer
 *                   while the revoker reads 0 and O reads the state still
 *                   biased (store buffering).
 *   -DBROKEN_ORDER  O loads the state before storing owner_in_ (one load
 *                   only: no re-check after the store).
 *   -DBROKEN_TRY    revoke(false) finishes the revocation (kShared) without
 *                   having seen owner_in_ = 0.
 *   -DBROKEN_UNLOCK unlock() stores 0 to both words, owner_in_ first: a
 *                   revoker that sees the first store takes locked_, and
 *                   the owner's second store lets it go while it is inside.
 */

#define NOPS 3
#define BUF 2

#define BIASED 1
#define REVOKING 2
#define SHARED 0

byte state = BIASED;
bit locked = 0;      /* the shared lock word (exchange)            */
bit owner_in = 0;    /* owner_in_, in memory                       */

/* O's store buffer: pending stores to owner_in (the value), oldest first. */
byte buf[BUF];
byte n = 0;

byte inside = 0;     /* ghost: holders right now */

inline push(v) {
  atomic { n < BUF -> buf[n] = v; n++ }
}

inline drain_one() {
  owner_in = buf[0];
  buf[0] = buf[1]; buf[1] = 0;
  n--
}

inline drain_all() {
  atomic { do :: n > 0 -> drain_one() :: else -> break od }
}

active proctype StoreBuffer() {
end:
  do
  :: atomic { n > 0 -> drain_one() }
  od
}

inline enter() {
  atomic { assert(inside == 0); inside++ }
}
inline leave() {
  inside--
}

/* Take the shared word with an exchange (an RMW: O's buffer drains first). */
inline take_shared(who_drains) {
  if
  :: who_drains -> (n == 0)
  :: else -> skip
  fi;
  atomic { locked == 0 -> locked = 1 }
}

active proctype O() {
  byte op = 0;
  byte s;
  bit got;
  do
  :: op == NOPS -> break
  :: else ->
       got = 0;
#ifdef BROKEN_ORDER
       s = state;
       if
       :: s == BIASED -> push(1); got = 1
       :: else -> skip
       fi;
#else
       s = state;                     /* lock(): state_.load */
       if
       :: s == BIASED ->
            push(1);                  /* owner_in_.store(1, relaxed) */
            s = state;                /* compiler barrier; state_.load */
            if
            :: s == BIASED -> got = 1
            :: else -> push(0)        /* owner_in_.store(0, release) */
            fi
       :: else -> skip
       fi;
#endif
       if
       :: got ->
            enter();                  /* held through owner_in_ */
            leave();
#ifdef BROKEN_UNLOCK
            push(0);                  /* unlock: owner_in_ = 0, */
            (n == 0);
            locked = 0                /* then locked_ = 0 too: may free R's hold */
#else
            push(0)                   /* unlock: owner_in_ = 0, the word held */
#endif
       :: else ->
            take_shared(1);           /* ... or the exchange on locked_ */
            enter();
            leave();
            (n == 0);                 /* unlock stores both words */
            locked = 0
       fi;
       op++
  od
}

/* revoke(): steps 1-4, then the exchange. */
active proctype R() {
  if
  :: state != SHARED ->
       atomic { if :: state == BIASED -> state = REVOKING :: else -> skip fi };  /* 1 */
#ifndef BROKEN_FENCE
       drain_all();                                                          /* 2 */
#endif
#ifndef BROKEN
       (owner_in == 0);                                                      /* 3 */
#endif
       state = SHARED                                                        /* 4 */
  :: else -> skip
  fi;
  take_shared(0);
  enter();
  leave();
  locked = 0
}

/* try_lock(): revoke(false), retried by the caller until it gets the lock. */
active proctype T() {
  bit done = 0;
  do
  :: done -> break
  :: else ->
       if
       :: state != SHARED ->
            atomic { if :: state == BIASED -> state = REVOKING :: else -> skip fi };
#ifndef BROKEN_FENCE
            drain_all();
#endif
            if
#ifndef BROKEN_TRY
            :: owner_in == 1 -> skip                     /* give up; retry */
            :: else -> state = SHARED
#else
            :: true -> state = SHARED
#endif
            fi
       :: else -> skip
       fi;
       if
       :: state == SHARED ->
            atomic {
              if
              :: locked == 0 -> locked = 1; done = 1
              :: else -> skip                            /* not had; retry */
              fi
            }
       :: else -> skip
       fi
  od;
  enter();
  leave();
  locked = 0
}
