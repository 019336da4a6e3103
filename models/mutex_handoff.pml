/* mutex_handoff.pml - capstan::mutex: the lock-free barge, the competitor's
 * return, hand-off at the overtake bound, and waiters that leave.
 *
 * Mirrors Note [Mutex hand-off] in lib/include/capstan/mutex.hpp:
 * lock (fast CAS, then barge), try_lock, unlock (a load, then one CAS;
 * unlock_barged; unlock_slow), acquire_locked and lock_slow; the queue and
 * park/serve of lib/include/capstan/detail/mvar_core.hpp (mvar_block.pml
 * checks those on their own), with Note [Waking after unlock] (a served
 * waiter is woken after core_'s lock is released) and a waiter taken off
 * the queue by whoever ends its wait otherwise (a time-out, a kill; Note
 * [Timed takes], Note [Raising asynchronously]).
 *
 * Parties: locker A re-locks three times in a row (the barging turn);
 * locker B locks twice, and a kill may end either of its waits while it
 * is queued; locker C makes one timed lock (its time-out may come at any
 * moment while it is queued; timed waiters are always handed the mutex)
 * and then one try_lock.  max_overtakes is 1, so the bound and kOwed are
 * reached.
 *
 * Abstractions.  state_ is two variables (kind, cnt) changed together in
 * one atomic step, as the one word is by one CAS; a CAS is a step that
 * compares both with what its thread last read.  A park is one step
 * (enqueued under core_'s lock, the lock released once off the CPU: park
 * releases it from the landing side), and a woken thread resumes at any
 * later moment.  The kill and the time-out are one party that may end one
 * queued wait of B and C each.
 *
 * Memory model: sequential consistency.  state_'s lock-free transitions
 * are CASes whose acquire/release pairs carry the critical sections'
 * writes (the code states each); everything else is under core_'s lock.
 * The model checks the protocol's logic, not the orderings.
 *
 * Properties.
 *  - Mutual exclusion: at most one thread between lock and unlock.
 *  - No lost wake-up: every locker finishes (no invalid end state).
 *  - The invariant of the Note: a competitor is on its way exactly when
 *    the kind is kWoken, kBarged or kOwed; kFree and kHeld have nobody
 *    queued or on the way and a zero count (a monitor, every state).
 *  - The count never passes max_overtakes.
 *
 * Broken variants:
 *   -DBROKEN         the competitor back to a barged mutex re-queues
 *                    without moving it to kContended: the barger's unlock
 *                    makes it kWoken and nobody wakes the competitor.
 *   -DBROKEN_OWED    a barger's unlock always makes the mutex kWoken
 *                    (never kOwed): the count passes the bound.
 *   -DBROKEN_STORE   a barger's unlock stores kWoken over what it loaded
 *                    instead of a CAS: it overwrites the competitor's
 *                    kContended, and the competitor, queued again, is
 *                    never woken.
 */

#define A 0
#define B 1
#define C 2
#define NL 3
#define MAXO 1        /* mutex::max_overtakes */

#define kFree      0
#define kHeld      1
#define kContended 2
#define kWoken     3
#define kOwed      4
#define kBarged    5

byte kind = kFree;    /* state_'s low bits */
byte cnt;             /* state_'s overtake count */
bool qlock;           /* core_'s lock */
byte q[NL];           /* core_'s FIFO of waiters: thread ids */
byte qlen;
bool queued[NL];
bool handed[NL];      /* lock_wait::handed */
bool timedw[NL];      /* waiter::timed */
bool woken[NL];       /* made runnable */
bool ended[NL];       /* the wait was ended by a kill or a time-out */
byte onway;           /* ghost: competitors woken and not yet back */
byte inside;          /* ghost: threads holding the mutex */
bool finished[NL];

inline lock_q() { atomic { !qlock -> qlock = 1 } }
inline unlock_q() { qlock = 0 }

inline enqueue(t, front) {
  atomic {
    if
    :: front ->
         i = qlen;
         do
         :: i > 0 -> q[i] = q[i - 1]; i--
         :: else -> break
         od;
         q[0] = t
    :: else -> q[qlen] = t
    fi;
    qlen++;
    queued[t] = 1;
    i = 0
  }
}
/* take t out of the FIFO wherever it is */
inline remove(t) {
  atomic {
    i = 0;
    do
    :: q[i] != t -> i++
    :: q[i] == t -> break
    od;
    do
    :: i + 1 < qlen -> q[i] = q[i + 1]; i++
    :: else -> break
    od;
    qlen--;
    q[qlen] = 0;
    queued[t] = 0;
    i = 0
  }
}

/* forget the scratch variables of an operation (fewer states) */
inline scrub() { atomic { sk = 0; sc = 0; lost = 0; done = 0; w = 0 } }

inline enter() { atomic { inside++; assert(inside == 1) } }
inline leave() { inside-- }

/* barge(s): CAS kWoken|n -> kBarged|n+1 while the kind read is kWoken */
inline barge() {
  do
  :: sk == kWoken ->
       atomic {
         if
         :: kind == sk && cnt == sc -> kind = kBarged; cnt = sc + 1; got = 1
         :: else -> sk = kind; sc = cnt
         fi
       };
       if
       :: got -> break
       :: else -> skip
       fi
  :: else -> break
  od
}

/* lock's and try_lock's fast path: CAS kFree -> kHeld, then barge */
inline try_lock_fast() {
  got = 0;
  atomic {
    if
    :: kind == kFree && cnt == 0 -> kind = kHeld; got = 1
    :: else -> sk = kind; sc = cnt
    fi
  };
  if
  :: !got -> barge()
  :: else -> skip
  fi
}

/* acquire_locked(competitor), core_'s lock held: sets got */
inline acquire_locked(me, competitor) {
  got = 0;
  if
  :: competitor -> atomic { assert(onway == 1) }
  :: else -> skip
  fi;
  atomic { sk = kind; sc = cnt };   /* the load */
  do
  :: sk == kOwed ->
       if
       :: competitor -> atomic { kind = (qlen > 0 -> kContended : kHeld); cnt = 0; onway--; got = 1 }
       :: else -> skip
       fi;
       break
  :: sk == kFree ->
       atomic {
         if
         :: kind == sk && cnt == sc -> kind = kHeld; got = 1
         :: else -> sk = kind; sc = cnt
         fi
       };
       if :: got -> break :: else -> skip fi
  :: sk == kWoken ->
       atomic {
         if
         :: kind == sk && cnt == sc ->
              if
              :: competitor -> kind = kContended; cnt = 0; onway--
              :: else -> kind = kBarged; cnt = sc + 1
              fi;
              got = 1
         :: else -> sk = kind; sc = cnt
         fi
       };
       if :: got -> break :: else -> skip fi
  :: sk == kHeld ->
       atomic {
         if
         :: kind == sk && cnt == sc -> kind = kContended; cnt = 0; done = 1
         :: else -> sk = kind; sc = cnt
         fi
       };
       if :: done -> done = 0; break :: else -> skip fi
  :: sk == kBarged ->
       if
       :: !competitor -> break
       :: else -> skip
       fi;
#ifdef BROKEN
       atomic { onway-- };
       break
#else
       atomic {
         if
         :: kind == sk && cnt == sc -> kind = kContended; onway--; done = 1
         :: else -> sk = kind; sc = cnt
         fi
       };
       if :: done -> done = 0; break :: else -> skip fi
#endif
  :: sk == kContended -> break
  od
}

/* lock_slow: `timed` may be ended by the time-out; sets got */
inline lock_slow(me, timed) {
  lost = 0;
  do
  :: lock_q();
     acquire_locked(me, lost);
     if
     :: got -> unlock_q(); break
     :: else -> skip
     fi;
     handed[me] = 0;
     timedw[me] = timed;
     enqueue(me, lost);
     /* park: off the CPU, then core_'s lock released by the landing side */
     atomic { unlock_q() };
     atomic { woken[me] -> woken[me] = 0 };
     if
     :: ended[me] -> ended[me] = 0; got = 0; break   /* killed or timed out */
     :: handed[me] -> got = 1; break
     :: else -> lost = 1   /* woken to compete */
     fi
  od
}

inline lock(me) {
  try_lock_fast();
  if
  :: !got -> lock_slow(me, 0)
  :: else -> skip
  fi;
  scrub()
}

/* unlock: a load, one CAS for what it saw; unlock_barged; unlock_slow */
inline unlock(me) {
  leave();
  atomic { sk = kind; sc = cnt };
  got = 0;
  if
  :: sk == kHeld && sc == 0 ->
       atomic {
         if
         :: kind == sk && cnt == sc -> kind = kFree; got = 1
         :: else -> sk = kind; sc = cnt
         fi
       }
  :: else -> skip
  fi;
  if
  :: !got ->
       /* unlock_barged */
       do
       :: sk == kBarged ->
#ifdef BROKEN_STORE
            atomic { kind = kWoken; cnt = sc; got = 1 };
            break
#else
            atomic {
              if
              :: kind == sk && cnt == sc ->
#ifdef BROKEN_OWED
                   kind = kWoken; cnt = sc;
#else
                   if
                   :: sc < MAXO -> kind = kWoken; cnt = sc
                   :: else -> kind = kOwed; cnt = 0
                   fi;
#endif
                   got = 1
              :: else -> sk = kind; sc = cnt
              fi
            };
            if :: got -> break :: else -> skip fi
#endif
       :: else -> break
       od
  :: else -> skip
  fi;
  if
  :: !got ->
       /* unlock_slow */
       lock_q();
       assert(kind == kContended);
       w = 255;
       if
       :: qlen > 0 ->
            w = q[0];
            if
            :: cnt >= MAXO || timedw[w] ->
                 atomic { handed[w] = 1; remove(w); kind = (qlen > 0 -> kContended : kHeld); cnt = 0 }
            :: else ->
                 atomic { remove(w); kind = kWoken; onway++ }
            fi
       :: else -> atomic { kind = kFree; cnt = 0 }
       fi;
       unlock_q();
       /* Note [Waking after unlock] */
       if
       :: w != 255 -> woken[w] = 1
       :: else -> skip
       fi
  :: else -> skip
  fi;
  scrub()
}

proctype LockerA() {
  byte sk, sc, i, w; bool got, lost, done;
  byte n = 0;
  do
  :: n < 3 ->
       lock(A);
       enter();
       unlock(A);
       n++
  :: else -> break
  od;
  finished[A] = 1
}

proctype LockerB() {
  byte sk, sc, i, w; bool got, lost, done;
  byte n = 0;
  do
  :: n < 2 ->
       lock(B);
       if
       :: got -> enter(); unlock(B)
       :: else -> skip      /* killed while queued: unwinds, no mutex */
       fi;
       n++
  :: else -> break
  od;
  finished[B] = 1
}

proctype LockerC() {
  byte sk, sc, i, w; bool got, lost, done;
  /* try_lock_for: fast path, then a timed wait (always handed) */
  try_lock_fast();
  if
  :: !got -> lock_slow(C, 1)
  :: else -> skip
  fi;
  scrub();
  if
  :: got -> enter(); unlock(C)
  :: else -> skip
  fi;
  /* try_lock */
  try_lock_fast();
  if
  :: got -> enter(); unlock(C)
  :: else -> skip
  fi;
  finished[C] = 1
}

/* A kill of B's wait and C's time-out: whoever ends a wait takes the
 * waiter off the queue under core_'s lock; if unlock served it first,
 * the waiter is no longer queued and nothing happens. */
proctype Ender() {
  byte i;
  bool didb = 0, didc = 0;
  do
  :: !didb && queued[B] ->
       lock_q();
       if
       :: queued[B] && !handed[B] && !timedw[B] -> remove(B); ended[B] = 1; didb = 1; unlock_q(); woken[B] = 1
       :: else -> unlock_q()
       fi
  :: !didc && queued[C] ->
       lock_q();
       if
       :: queued[C] && timedw[C] -> remove(C); ended[C] = 1; didc = 1; unlock_q(); woken[C] = 1
       :: else -> unlock_q()
       fi
  :: finished[B] && finished[C] -> break
  od
}

/* The Note's invariant, in every state. */
active proctype Monitor() {
end:
  do
  :: atomic {
       !((onway == 1) == (kind == kWoken || kind == kBarged || kind == kOwed)) ||
       ((kind == kFree || kind == kHeld) && (qlen > 0 || cnt != 0)) ||
       cnt > MAXO || onway > 1 ->
       assert(false)
     }
  od
}

init {
  atomic {
    run LockerA();
    run LockerB();
    run LockerC();
    run Ender()
  }
}
