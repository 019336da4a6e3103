/* mvar_block.pml - blocking on an mvar and being woken by a put, a take,
 * or an asynchronous exception.
 *
 * Mirrors Note [Blocking on an MVar] in rts/schedule/park.hpp
 * (park_current: the blocker switches away holding the mvar's lock, the
 * landing side releases it), Note [Waking after unlock] in
 * lib/include/capstan/detail/mvar_core.hpp (core_op: unlock, then
 * wake_all), mvar<T>::take/put/deliver/refill_from_putter in
 * lib/include/capstan/mvar.hpp, mvar_core::park_wait/publish_wait/serve in
 * rts/mvar/mvar_core.cpp, and post_throw in rts/schedule/raise.cpp (Note
 * [Raising asynchronously]: the thrower takes the blocker's wait_lock and
 * tries the mvar lock; the blocker decides to park under wait_lock), and
 * Note [Timed takes] in rts/mvar/mvar_core.cpp (park_timed,
 * expire_timed_take: the timer on the IO thread ends a take_for).
 *
 * Parties: one mvar, initially empty; taker T1 (take); taker T2
 * (take_for, whose timer may fire at any moment, then take - so a stale
 * timer can meet a later, untimed wait); a putter P that puts three times
 * (so it may block on a full mvar and be served by a take's
 * refill_from_putter); a thrower K that kill_threads T1 once.  Each runs
 * on its own capability; T2's timer runs on the IO thread.
 *
 * Abstractions.  The value is a flag (mfull) and the values handed over
 * are counted; the waiter FIFO is an array of thread ids.  A switch is two
 * steps: the context saved (saved[t]), then the landing side's
 * after_switch (which releases the mvar lock).  A woken thread is resumed
 * by some capability at any later moment.  Thread::wait_lock is taken on
 * every wait (rt.waits_need_lock is on: kill_thread turns it on before it
 * posts - Note [Wait locks]; its asymmetric fence is not modelled).  No
 * masks.  A served thread raises a pending exception at its next safe
 * point (the end of its operation here); a finishing thread drops its
 * pending messages (finish_pending: the thrower is told).
 *
 * Memory model: sequential consistency.  Every shared field here is
 * accessed under the mvar's lock or a thread's wait_lock (exchange
 * acquire / store release), so the program is data-race free and C++
 * guarantees sequentially consistent behaviour for it (SC-DRF).  The
 * one exception, blocked_on written without wait_lock while no thrower
 * exists, is outside this model (waits_need_lock is on).
 *
 * Properties.
 *  - No lost wake-up: in every interleaving every thread finishes (three
 *    puts, three values wanted): no invalid end state, and the assertion
 *    at timeout; exactly one party ends each wait, and only a timed wait
 *    times out;
 *    the values are conserved (taken + left in the mvar == put).
 *  - A thread is made runnable only once its context is saved, and at
 *    most once per block (assertions in wake).
 *  - Note [Waking after unlock]: when a woken thread resumes, whoever woke
 *    it has stopped touching the mvar (it may destroy the mvar at once).
 *  - Note [Raising asynchronously]: a thread never waits on the mvar with
 *    an exception pending for it (a monitor asserts it in every state).
 *
 * Broken variants:
 *   -DBROKEN         the blocker releases the mvar lock before its context
 *                    is saved (not by the landing side): a put wakes a
 *                    thread still on its stack.
 *   -DBROKEN_RECHECK publish_wait does not look at the pending list under
 *                    wait_lock: a kill posted just before the wait is
 *                    published is left pending while T1 sleeps.
 *   -DBROKEN_WAKE    core_op wakes the served threads before unlocking:
 *                    the woken thread resumes while its waker still holds
 *                    the mvar.
 *   -DBROKEN_TOKEN   the timer does not compare timed_seq with its token:
 *                    a stale expiry (its take_for was served) ends T2's
 *                    next, untimed take as timed out.
 */

#define T1 0
#define T2 1
#define P  2
#define K  3
#define TM 4          /* T2's timer (expire_timed_take, on the IO thread) */
#define NT 3          /* threads that use the mvar */
#define NPUT 3

bool mlock;           /* mvar_core::locked_ */
bool mfull;            /* value_ */
byte q[NT];           /* the waiter FIFO: thread ids */
byte qlen;
bool wlock[NT];       /* Thread::wait_lock */
bool blocked_on[NT];  /* Thread::blocked_on == &m [wait_lock] */
byte outcome[NT];     /* waiter::outcome */
bool saved[NT];       /* the thread's context is saved (it is off the CPU) */
bool runnable[NT];    /* woken, not yet resumed */
bool pending[NT];     /* Thread::async_pending (a queued ThrowMsg) [wait_lock] */
bool live[NT];        /* Thread::live_id still the thrower's [wait_lock] */
byte timed_seq[NT];   /* Thread::timed_seq [wait_lock] */
byte timed_next[NT];  /* Thread::timed_next [the thread] */
byte nops[NT + 2];    /* ghost: operations each party began on the mvar */
byte touching[NT + 2];/* ghost: the operation a party is inside (lock..unlock), or 0 */
byte woken_by[NT];    /* ghost: who made the thread runnable, */
byte woken_op[NT];    /* ghost: in which of its operations */
bool finished[NT];
byte taken;           /* values taken */
byte raised;          /* kills raised in T1 */

#define SERVED      1
#define INTERRUPTED 2
#define TIMED_OUT   3

inline lock_m(me) {
  atomic { !mlock -> mlock = 1; nops[me]++; touching[me] = nops[me] }
}
inline unlock_m(me) {
  atomic { mlock = 0; touching[me] = 0 }
}
inline lock_w(t) {
  atomic { !wlock[t] -> wlock[t] = 1 }
}
inline unlock_w(t) {
  wlock[t] = 0
}
inline enqueue(t) {
  q[qlen] = t; qlen++
}
/* mvar_core::remove: take t out of the FIFO wherever it is. */
inline remove(t, i) {
  atomic {
    i = 0;
    do
    :: i < qlen && q[i] != t -> i++
    :: i < qlen && q[i] == t -> break
    :: i == qlen -> assert(false)   /* not queued */
    od;
    do
    :: i + 1 < qlen -> q[i] = q[i + 1]; i++
    :: else -> break
    od;
    qlen--;
    q[qlen] = 0;
    i = 0
  }
}
/* rts::wake: the thread becomes runnable (pushed to a run queue/inbox). */
inline wake(t, me) {
  atomic {
    assert(saved[t]);       /* never resumed half-switched */
    assert(!runnable[t]);   /* woken once per block */
    runnable[t] = 1;
    woken_by[t] = me;
    woken_op[t] = nops[me]
  }
}
/* mvar_core::serve (lock held): dequeue, clear blocked_on under wait_lock,
 * settle the outcome; the thread is woken after unlock by the caller. */
inline serve(t, me, i) {
  remove(t, i);
  lock_w(t);
  blocked_on[t] = 0;
  unlock_w(t);
  outcome[t] = SERVED
}

/* The blocking half shared by take, take_for and put (lock held, nothing
 * to do now): enqueue, publish_wait, (io_add_timeout,) park_current,
 * raise_outcome.  Sets `killed` if an exception ended the wait instead, and
 * `timedout` if the timer did (timed waits only). */
inline block(me, i, killed, timed, timedout, token) {
  enqueue(me);
  outcome[me] = 0;
  if
  :: timed -> timed_next[me]++; token = timed_next[me]
  :: else -> token = 0
  fi;
  /* publish_wait: decide under wait_lock */
  lock_w(me);
#ifndef BROKEN_RECHECK
  if
  :: pending[me] ->
       pending[me] = 0;      /* pop_raisable */
       unlock_w(me);
       remove(me, i);
       unlock_m(me);
       killed = 1;
       goto unblocked
  :: else -> skip
  fi;
#endif
  blocked_on[me] = 1;
  timed_seq[me] = token;
  unlock_w(me);
  /* io_add_timeout: the timer may fire from now on (Note [Timed takes]) */
  if
  :: timed -> run Timer(me, token)
  :: else -> skip
  fi;
  /* park_current: switch away holding the lock; the landing side
   * (after_switch) releases it once the context is saved. */
#ifdef BROKEN
  unlock_m(me);
  saved[me] = 1;
#else
  saved[me] = 1;
  unlock_m(me);
#endif
  /* ... resumed by some capability once woken ... */
  atomic { runnable[me] -> runnable[me] = 0; saved[me] = 0 }
  /* Note [Waking after unlock]: the waker no longer touches the mvar. */
  assert(touching[woken_by[me]] != woken_op[me]);
  if
  :: timed -> lock_w(me); timed_seq[me] = 0; unlock_w(me)
  :: else -> skip
  fi;
  /* raise_outcome */
  if
  :: outcome[me] == INTERRUPTED -> killed = 1
  :: outcome[me] == TIMED_OUT -> assert(timed); timedout = 1
  :: else -> assert(outcome[me] == SERVED)
  fi;
unblocked:
  skip
}

/* core_op's end: unlock, then wake the served thread (if any). */
inline finish_op(me, served) {
#ifdef BROKEN_WAKE
  if
  :: served != NT -> wake(served, me)
  :: else -> skip
  fi;
  unlock_m(me);
#else
  unlock_m(me);
  if
  :: served != NT -> wake(served, me)
  :: else -> skip
  fi
#endif
}

/* A safe point after the operation (raise_pending), then the thread
 * finishes (finish_pending drops what is still pending). */
inline end_thread(me) {
  lock_w(me);
  if
  :: pending[me] -> pending[me] = 0; raised++
  :: else -> skip
  fi;
  live[me] = 0;
  unlock_w(me);
  finished[me] = 1
}

/* expire_timed_take (rts/mvar/mvar_core.cpp): fires at any moment after
 * io_add_timeout - also after the wait ended and the timer was cancelled
 * (Note [Cancelling a timer]): a stale expiry must do nothing. */
proctype Timer(byte t; byte token) {
  byte i;
retry:
  lock_w(t);
  if
#ifdef BROKEN_TOKEN
  :: !blocked_on[t] -> unlock_w(t)          /* (no look at timed_seq) */
#else
  :: timed_seq[t] != token || !blocked_on[t] -> unlock_w(t)
#endif
  :: else ->
       if
       :: atomic { !mlock -> mlock = 1; nops[TM]++; touching[TM] = nops[TM] } ->
            remove(t, i);
            outcome[t] = TIMED_OUT;
            blocked_on[t] = 0;
            unlock_w(t);
            unlock_m(TM);
            wake(t, TM)
       :: else -> unlock_w(t); goto retry     /* try_lock failed: back off */
       fi
  fi
}

/* T1: take().  T2: take_for(d), then take(): it wants two values; a
 * take_for that timed out is followed by another take. */
proctype Taker(byte me) {
  byte i, served, token, want;
  bool killed, timed, timedout;
  want = 1;
  timed = 0;
  if
  :: me == T2 -> want = 2; timed = 1
  :: else -> skip
  fi;
  do
  :: want == 0 -> break
  :: want > 0 ->
       served = NT;
       killed = 0;
       timedout = 0;
       lock_m(me);
       if
       :: mfull ->
            /* take_value, refill_from_putter */
            mfull = 0;
            taken++;
            if
            :: qlen > 0 ->
                 served = q[0];       /* a putter: its value goes in */
                 serve(served, me, i);
                 mfull = 1
            :: else -> skip
            fi;
            finish_op(me, served);
            want--
       :: else ->
            block(me, i, killed, timed, timedout, token);
            if
            :: killed -> raised++; want = 0
            :: timedout -> skip       /* take_for gave up: take again */
            :: else -> taken++; want--   /* the putter filled dest */
            fi
       fi;
       timed = 0                      /* T2's second operation is a plain take */
  od;
  end_thread(me)
}

active proctype Putter() {
  byte i, served, n, token;
  bool killed, timedout;
  n = 0;
  do
  :: n == NPUT -> break
  :: n < NPUT ->
       served = NT;
       lock_m(P);
       if
       :: !mfull ->
            /* deliver: the oldest taker gets the value, or it goes in */
            if
            :: qlen > 0 -> served = q[0]; serve(served, P, i)
            :: else -> mfull = 1
            fi;
            finish_op(P, served)
       :: else ->
            block(P, i, killed, 0, timedout, token);
            assert(!killed)           /* nobody throws to P */
       fi;
       n++
  od;
  end_thread(P)
}

/* kill_thread(T1): post_throw. */
active proctype Killer() {
  byte i;
retry:
  lock_w(T1);
  if
  :: !live[T1] -> unlock_w(T1)                 /* gone */
  :: live[T1] && blocked_on[T1] ->
       /* interrupt the wait: try the mvar lock (order: mvar -> wait_lock) */
       if
       :: atomic { !mlock -> mlock = 1; nops[K]++; touching[K] = nops[K] } ->
            remove(T1, i);
            outcome[T1] = INTERRUPTED;
            blocked_on[T1] = 0;
            unlock_w(T1);
            unlock_m(K);                       /* before waking */
            wake(T1, K)
       :: else -> unlock_w(T1); goto retry     /* back off and retry */
       fi
  :: live[T1] && !blocked_on[T1] ->
       pending[T1] = 1;                        /* append; interrupt_all */
       unlock_w(T1)
  fi
}

/* Note [Raising asynchronously]: never blocked with a message pending. */
active proctype Monitor() {
  assert(!(blocked_on[T1] && pending[T1]))
}

active proctype Checker() {
  timeout ->
  assert(finished[T1] && finished[T2] && finished[P]);
  assert(taken + mfull == NPUT);
  assert(qlen == 0)
}

init {
  atomic {
    live[T1] = 1; live[T2] = 1; live[P] = 1;
    run Taker(T1);
    run Taker(T2)
  }
}
