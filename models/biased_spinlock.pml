/* biased_spinlock.pml - a capability's home-list lock, biased to the
 * capability's holder, visited now and then by other OS threads, the bias
 * coming back when they leave.
 *
 * Mirrors Note [Biased spin locks] in rts/primitives/biased_spinlock.hpp:
 * BiasedSpinLock::lock(owner) and unlock (inline), lock_visitor and
 * unlock_visitor (rts/primitives/biased_spinlock.cpp).
 *
 * Parties: the capability's holder O, locking NOPS times (through
 * owner_in_ while it reads no visitors, else backing off to the shared
 * word's exchange), and two visitors V, each locking VOPS times (count,
 * membarrier, wait for owner_in_ = 0, exchange; unlock: the shared word,
 * then the count).
 *
 * Memory model, as biased_lock.pml: O's stores to owner_in go through a
 * FIFO store buffer that a separate process drains (TSO), its loads read
 * memory; the visitors' read-modify-writes and O's exchanges drain first
 * and act on memory; membarrier(PRIVATE_EXPEDITED) is one atomic step of
 * a visitor that drains O's whole buffer.
 *
 * Property: mutual exclusion - never two holders at once (an assertion as
 * each enters), and every party gets through (the search ends: -DSAFETY
 * with invalid end states reported).
 *
 * Broken variants:
 *   -DBROKEN         a visitor does not wait for owner_in_ = 0 (no step 3).
 *   -DBROKEN_FENCE   no membarrier: O's owner_in_ = 1 waits in its buffer
 *                    while the visitor reads 0 and O reads no visitors.
 *   -DBROKEN_UNLOCK  O's unlock stores 0 to both words, owner_in_ first.
 *   -DBROKEN_COUNT   a visitor does not count itself in: O, which reads no
 *                    visitors, enters through owner_in_ beside one that
 *                    waited for owner_in_ = 0 and took the shared word.
 */

#define NOPS 3
#define VOPS 2
#define BUF 2

bit locked = 0;      /* the shared lock word (exchange)   */
bit owner_in = 0;    /* owner_in_, in memory              */
byte visitors = 0;   /* visitors_                          */

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

active proctype O() {
  byte op = 0;
  bit got;
  do
  :: op == NOPS -> break
  :: else ->
       push(1);                       /* owner_in_.store(1, relaxed) */
       if                             /* compiler barrier; visitors_.load */
       :: visitors == 0 -> got = 1
       :: else -> got = 0; push(0)    /* backing off: owner_in_ = 0 */
       fi;
       if
       :: !got -> (n == 0); atomic { locked == 0 -> locked = 1 }  /* spin_lock */
       :: else -> skip
       fi;
       enter();
       leave();
       if
       :: got ->
#ifdef BROKEN_UNLOCK
            push(0);                  /* owner_in_ = 0, */
            (n == 0);
            locked = 0                /* then locked_ = 0 too */
#else
            push(0)                   /* the word held: owner_in_ = 0 */
#endif
       :: else ->
            (n == 0);
            locked = 0                /* the word held: locked_ = 0 */
       fi;
       op++
  od
}

proctype V() {
  byte op = 0;
  do
  :: op == VOPS -> break
  :: else ->
#ifndef BROKEN_COUNT
       visitors++;                    /* 1: fetch_add, seq_cst */
#endif
#ifndef BROKEN_FENCE
       drain_all();                   /* 2: membarrier */
#endif
#ifndef BROKEN
       (owner_in == 0);               /* 3 */
#endif
       atomic { locked == 0 -> locked = 1 };  /* 4 */
       enter();
       leave();
       locked = 0;                    /* unlock_visitor: locked_ = 0, */
#ifndef BROKEN_COUNT
       visitors--;                    /* then visitors_ -= 1 */
#endif
       op++
  od
}

init {
  atomic { run V(); run V() }
}
