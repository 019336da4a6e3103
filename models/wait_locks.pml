/* wait_locks.pml - turning the wait locks on: the run's first throw
 * against a capability writing a wait field without the lock.
 *
 * Mirrors Note [Wait locks] in rts/schedule/raise.cpp (enable_wait_locks)
 * and begin_unlocked_wait_write / end_unlocked_wait_write in
 * rts/schedule/raise.hpp, as publish_wait and mvar_core::serve
 * (rts/mvar/mvar_core.cpp) and finish_pending use them.
 *
 * Parties: a capability's Task W making three wait writes in a row (a
 * block, a wake, a block: blocked_on set, cleared, set), each either
 * unlocked (the flag read false) or under the wait lock; an enabler E
 * (the run's first throw_to) that turns the locks on and then reads the
 * field under the lock, as post_throw does.
 *
 * Memory model.  What could break the argument is a store passing a later
 * load (x86's store buffer: W's store of the marker still buffered while
 * its load of the flag reads false), so W's stores go through a FIFO store
 * buffer that a separate process drains one store at a time (TSO).  W's
 * loads read memory (W never loads what it buffered).  E's stores are
 * seq_cst (xchg: straight to memory).  membarrier(PRIVATE_EXPEDITED) runs
 * a full barrier on W's CPU at some instant between two of W's steps: it
 * is one atomic step of E that drains W's whole buffer.  The compiler
 * barrier after the marker's store keeps program order, which the model
 * has; BROKEN_ORDER takes it away.  Under the wait lock a write needs no
 * buffer: the lock's release and acquire order it, and E reads the field
 * only under the lock.
 *
 * Property: once E has finished turning the locks on (step 3), no
 * unlocked write is in progress or still buffered, and none starts: an
 * assertion at E's read, and one at W's every unlocked write.
 *
 * Broken variants:
 *   -DBROKEN        E does not wait for the marker (no step 3): it reads
 *                   the field while W's unlocked write is in progress.
 *   -DBROKEN_FENCE  E makes no membarrier: W's store of the marker waits
 *                   in its buffer, E reads 0 from memory, and W's load of
 *                   the flag has already read false.
 *   -DBROKEN_ORDER  W loads the flag before storing the marker (no
 *                   compiler barrier): E can read the marker 0 between.
 */

#define NOPS 3
#define BUF 4

/* Memory. */
bit flag = 0;        /* rt.waits_need_lock                           */
bit marker = 0;      /* W's capability's unlocked_wait_write         */
bit field = 0;       /* the thread's blocked_on (set / cleared)      */

/* W's store buffer: kinds of pending stores, oldest first. */
#define S_MARK1   1  /* unlocked_wait_write = 1                      */
#define S_FIELD1  2  /* blocked_on = set                             */
#define S_FIELD0  3  /* blocked_on = null                            */
#define S_END     4  /* unlocked_wait_write = 0, ending an unlocked write */
#define S_MARK0   5  /* unlocked_wait_write = 0 on the way to the lock */
byte buf[BUF];
byte n = 0;

bit unlocked = 0;    /* ghost: W read the flag false; its unlocked write's
                        end has not reached memory yet */
bit locks_on = 0;     /* ghost: E finished step 3 */
byte wlock = 0;      /* Thread::wait_lock: 0 free, 1 W, 2 E */
byte done_ops = 0;

inline push(k) {
  atomic { n < BUF -> buf[n] = k; n++ }
}

/* Apply the oldest buffered store to memory. */
inline drain_one() {
  if
  :: buf[0] == S_MARK1 -> marker = 1
  :: buf[0] == S_FIELD1 -> field = 1
  :: buf[0] == S_FIELD0 -> field = 0
  :: buf[0] == S_END -> marker = 0; unlocked = 0
  :: buf[0] == S_MARK0 -> marker = 0
  fi;
  buf[0] = buf[1]; buf[1] = buf[2]; buf[2] = buf[3]; buf[3] = 0;
  n--
}

active proctype StoreBuffer() {
end:
  do
  :: atomic { n > 0 -> drain_one() }
  od
}

active proctype W() {
  byte op = 0;
  bit f;
  do
  :: op == NOPS -> break
  :: else ->
#ifdef BROKEN_ORDER
       f = flag;
       push(S_MARK1);
#else
       push(S_MARK1);              /* unlocked_wait_write.store(1, relaxed) */
       atomic {                    /* signal fence; waits_need_lock.load()  */
         f = flag;
         if
         :: !f -> unlocked = 1
         :: else -> skip
         fi
       };
#endif
#ifdef BROKEN_ORDER
       if
       :: !f -> unlocked = 1
       :: else -> skip
       fi;
#endif
       if
       :: !f ->
            assert(!locks_on);      /* no unlocked write once E is done */
            if
            :: op % 2 == 0 -> push(S_FIELD1)
            :: else -> push(S_FIELD0)
            fi;
            push(S_END)            /* unlocked_wait_write.store(0, release) */
       :: else ->
            push(S_MARK0);
            atomic { wlock == 0 -> wlock = 1 };
            /* under the lock, ordered by it: straight to memory, after
             * W's earlier stores (the lock's acquire is an RMW: it drains) */
            (n == 0);
            if
            :: op % 2 == 0 -> field = 1
            :: else -> field = 0
            fi;
            wlock = 0
       fi;
       op++
  od;
  done_ops = op
}

active proctype E() {
  flag = 1;                          /* 1. seq_cst store */
#ifndef BROKEN_FENCE
  atomic { do :: n > 0 -> drain_one() :: else -> break od }  /* 2. membarrier */
#endif
#ifndef BROKEN
  (marker == 0);                     /* 3. acquire load until 0 */
#endif
  locks_on = 1;
  atomic { wlock == 0 -> wlock = 2 };
  assert(!unlocked);                 /* post_throw reads blocked_on here */
  wlock = 0
}
