/* chan_wait.pml - a chan's two ends: writers publishing through the state
 * word, readers taking under the readers' lock, blocking, being served,
 * and a blocked reader killed.
 *
 * Mirrors lib/include/capstan/chan.hpp: chan<T>::put (lock_writers, the
 * publishing compare-exchange, serve_from_writer), read (take_now,
 * spin_for_item, block_or_serve, park), serve_locked, and Notes [Chan
 * readers waiting], [Chan readers spin] and [Chan lifetime]; core_op's
 * wake_now and Note [Waking after unlock] in
 * lib/include/capstan/detail/mvar_core.hpp; park's hand-over of the lock
 * (Note [Blocking on an MVar] in rts/schedule/park.hpp) and post_throw's
 * removal of a blocked waiter (rts/schedule/raise.cpp).
 *
 * Parties: writers W0 and W1, one item each; readers R0 and R1, one
 * blocking read each; a killer K that may kill R1 once while it is
 * blocked.  Each runs on its own capability.
 *
 * Abstractions.  Items are counted: `count` is the published count in
 * state_, `rpos` the readers' position; the slots and blocks are left
 * out (a reader takes only below the count it acquired, which the
 * release/acquire pair makes safe; chan_test and the stress test cover
 * the blocks).  available() reads the current count: the real reader may
 * use its cached seen_, which is never ahead of the count, and a read of
 * an older count is the same as a read made earlier in another
 * interleaving.  The state word's fields (writers' lock, kWait, the
 * server count, the count) change only together, in atomic steps, as
 * the read-modify-writes on the one word do.  The waiter FIFO is an array
 * of reader ids.  A switch is two steps: the context saved, then the
 * landing side's unlock of the readers' lock.  The spin of
 * spin_for_item is one optional unlock-relock window (what it reads there
 * is only a hint; the decision is re-made under the lock).
 *
 * Memory model: sequential consistency.  The state word is accessed only
 * by read-modify-writes (one total order) and loads whose staleness is
 * covered above; everything else is under the readers' lock or the
 * writers' lock bit, so the rest is data-race free (SC-DRF).
 *
 * Properties.
 *  - No lost wake-up: every interleaving ends with both writers done, R0
 *    holding an item, and R1 holding an item or killed (no invalid end
 *    state); nobody parks while an item is there for it.
 *  - Exactly once: items taken plus items left equal items written, and a
 *    reader gets at most one (assertions).
 *  - A reader is made runnable only once its context is saved, and once.
 *  - Note [Chan lifetime]: once every written item has been read and no
 *    server is counted - when the destructor may free the chan - no writer
 *    is still touching it (a monitor asserts it in every state).
 *
 * Broken variants:
 *   -DBROKEN          block_or_serve does not look at the count it
 *                     learned: a reader that queued after a publish that
 *                     saw no kWait parks with its item in the chan.
 *   -DBROKEN_WAKE     a reader that served blocked readers in take_now
 *                     and then blocks does not wake them first
 *                     (core_op::wake_now): its park hands the lock on and
 *                     nobody ever wakes them.
 *   -DBROKEN_SERVERS  a serving writer stops counting itself before it
 *                     serves, not after: the destructor could free the
 *                     chan under it.
 */

#define NW 2
#define NR 2
#define R0 0
#define R1 1

/* state_ */
bool wlock;          /* bit 0: the writers' lock */
bool kwait;          /* bit 1: readers may be waiting */
byte servers;        /* bits 2-15: writers still serving */
byte count;          /* bits 16-63: items published */

/* readers' side, under the readers' lock (mvar_core::locked_) */
bool rlock;
byte rpos;           /* items taken */
byte q[NR];          /* blocked readers, oldest first */
byte qlen;

bool got[NR];        /* the reader has an item (its dest) */
bool saved[NR];      /* the reader's context is saved (parked) */
bool blocked[NR];    /* parked and queued: what post_throw looks for */
bool runnable[NR];   /* woken, not yet resumed */
bool killed;         /* R1 was killed while blocked */
bool rdone[NR];
bool wtouch[NW];     /* ghost: a writer touching the chan after publishing */
byte wdone;

inline lock_r() { atomic { !rlock -> rlock = 1 } }
inline unlock_r() { rlock = 0 }

inline dequeue_front() {
  atomic {
    q[0] = q[1]; q[1] = 0; qlen--
  }
}

/* post_throw's removal, or the self-serve's: take r out wherever it is. */
inline remove(r) {
  atomic {
    if
    :: qlen > 0 && q[0] == r -> q[0] = q[1]
    :: else -> assert(qlen == 2 && q[1] == r)
    fi;
    q[1] = 0; qlen--
  }
}

/* rts::wake, after unlock: the reader becomes runnable. */
inline wake(r) {
  atomic {
    assert(saved[r]);     /* never resumed half-switched */
    assert(!runnable[r]); /* once */
    runnable[r] = 1
  }
}

/* serve_locked (readers' lock held): hand items to blocked readers, oldest
 * first; collect them in wk (a bit per reader) to wake after unlock;
 * clear kWait once nobody waits. */
inline serve_locked(wk, r) {
  do
  :: qlen > 0 && rpos < count ->
       r = q[0];
       dequeue_front();
       assert(!got[r]);
       rpos++; got[r] = 1;
       blocked[r] = 0;
       wk = wk | (1 << r)
  :: else -> break
  od;
  if
  :: qlen == 0 -> kwait = 0
  :: else -> skip
  fi
}

inline wake_all(wk) {
  if
  :: wk & 1 -> wake(R0)
  :: else -> skip
  fi;
  if
  :: wk & 2 -> wake(R1)
  :: else -> skip
  fi;
  wk = 0
}

proctype Writer(byte w) {
  bool saw_wait;
  byte wk, r;
  /* lock_writers: take the lock bit (acquire) */
  atomic { !wlock -> wlock = 1 }
  /* ... the item goes into its slot ... */
  /* the publishing compare-exchange: count + 1, lock bit dropped, and a
   * server counted if kWait was set - one read-modify-write */
  atomic {
    count++; wlock = 0; saw_wait = kwait;
    if
    :: saw_wait -> servers++; wtouch[w] = 1
    :: else -> skip
    fi
  }
  if
  :: saw_wait ->
#ifdef BROKEN_SERVERS
       servers--;
#endif
       /* serve_from_writer */
       lock_r();
       serve_locked(wk, r);
       unlock_r();
#ifndef BROKEN_SERVERS
       atomic { servers--; wtouch[w] = 0 };
#else
       wtouch[w] = 0;
#endif
       wake_all(wk)
  :: else -> skip
  fi;
  wdone++
}

proctype Reader(byte me) {
  byte wk, r;
  lock_r();
  /* take_now: blocked readers first */
  if
  :: qlen > 0 ->
       serve_locked(wk, r);
       if
       :: qlen > 0 -> goto block
       :: else -> skip
       fi
  :: else -> skip
  fi;
  if
  :: rpos < count -> goto take
  :: else -> skip
  fi;
  /* spin_for_item (where it applies): watch with the lock dropped */
  if
  :: true ->
       unlock_r();
       lock_r();
       if
       :: qlen == 0 && rpos < count -> goto take
       :: else -> skip
       fi
  :: true -> skip
  fi;
block:
  /* block_or_serve */
#ifndef BROKEN_WAKE
  if
  :: wk != 0 -> unlock_r(); wake_all(wk); lock_r()   /* core_op::wake_now */
  :: else -> skip
  fi;
#endif
  q[qlen] = me; qlen++;
  kwait = 1;   /* fetch_or: in the same step it learns the count (read below) */
#ifndef BROKEN
  if
  :: q[0] == me && rpos < count ->
       remove(me);
       rpos++; got[me] = 1;
       if
       :: qlen == 0 -> kwait = 0
       :: else -> skip
       fi;
       unlock_r();
       wake_all(wk);
       goto done
  :: else -> skip
  fi;
#endif
  /* park: switch away holding the lock; the landing side releases it */
  atomic { saved[me] = 1; blocked[me] = 1 };
  unlock_r();
  /* ... resumed by some capability once woken ... */
  atomic { runnable[me] -> runnable[me] = 0; saved[me] = 0 };
  assert(got[me] || (me == R1 && killed));
  goto done;
take:
  assert(!got[me]);
  rpos++; got[me] = 1;
  unlock_r();
  wake_all(wk);
done:
  rdone[me] = 1
}

/* kill_thread(R1): post_throw finds R1 blocked, takes it out of the queue
 * under the readers' lock (try_lock), and wakes it with the exception. */
proctype Killer() {
end:  /* R1 may never block: then there is nothing to kill */
  atomic {
    !rlock && blocked[R1] ->
      remove(R1);
      blocked[R1] = 0;
      killed = 1
  };
  wake(R1)
}

/* Note [Chan lifetime]: when the destructor could run - every item
 * written has been read, no server counted - no writer touches the chan. */
active proctype Lifetime() {
end:
  do
  :: atomic {
       (rpos == NW && servers == 0 && (wtouch[0] || wtouch[1])) ->
         assert(false)
     }
  od
}

init {
  atomic {
    run Writer(0); run Writer(1);
    run Reader(R0); run Reader(R1);
    run Killer()
  };
  /* every party done (the killer's kill is optional) */
  (wdone == NW && rdone[R0] && rdone[R1]);
  assert(got[R0]);
  assert(got[R1] != killed);    /* an item, or killed: not both */
  assert(count == NW);
  assert(rpos == got[R0] + got[R1]);  /* each item taken went to one reader */
  assert(qlen == 0)
}
