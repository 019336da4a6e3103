/* ticker_park.pml - the ticker parking while every capability is idle,
 * and deadlock detection that must still find the deadlock that follows.
 *
 * Mirrors Note [Stopping the ticker] in rts/runtime/ticker.cpp
 * (Ticker::loop: the look at rt.idle_word, the tick's judgement, the
 * park), the end of idle() in rts/schedule/idle.cpp (the exit RMW on
 * rt.idle_word, then the look at rt.ticker_parked), and Note [Deadlock
 * detection] in rts/exception/deadlock.cpp (deadlock_tick: every
 * capability idle, nothing pending, so every blocked thread is raised).
 *
 * Parties: one capability (its Task idles, runs what reaches its inbox,
 * idles again); one green thread T that sleeps on a timer, then blocks
 * for good on an mvar, and, raised by deadlock detection, blocks for good
 * once more before it finishes (two deadlocks in a row); the IO manager,
 * which fires T's timer at any moment; the ticker, which ticks, judges
 * and may park; shutdown, which stops the ticker once T has finished.
 *
 * Abstractions.  The tick's judgement is one atomic look at the state,
 * exact at that instant, and acts at once: the real ticker acts only on
 * a quiet state confirmed over two ticks, which only delays it, and parks
 * only after two idle ticks, which only parks it less.  So the model's
 * ticker parks and acts at least whenever the real one can, and the
 * staleness that matters - the state moving between the judgement and
 * the park - is kept whole: the judgement, the look at idle_word, the
 * store of ticker_parked, the second look and the futex wait are separate
 * steps.  A second capability would add a party that only idles, and
 * nothing the argument depends on.  idle_word is two counters (idle
 * capabilities, exits) changed together in one atomic step, as the RMW
 * does.  The futex wait is `ticker_parked == 0` becoming true (FUTEX_WAIT
 * re-checks the word atomically, so this is exact).
 *
 * Memory model.  Every access in the protocol is seq_cst (or an RMW), so
 * spin's interleavings - sequential consistency - are exactly the
 * executions C++ allows.
 *
 * Property: no lost tick.  In every state where no process can move
 * (spin's timeout), T has finished and the ticker has stopped: the ticker
 * never stays parked while a deadlock waits to be found.
 *
 * Broken variants:
 *   -DBROKEN        the ticker checks only the count of idle capabilities
 *                   (as it once did), not that none has left idle() since
 *                   its judgement: T's timer fires after the judgement, T
 *                   runs and blocks for good, its capability re-enters
 *                   idle, and the ticker parks on "a timer is pending".
 *   -DBROKEN_WAKE   the capability looks at ticker_parked before its exit
 *                   RMW instead of after: both sides miss each other.
 *   -DBROKEN_SKIP   the count only, as BROKEN, but no park on a tick that
 *                   broke a deadlock (the ticker's earlier remedy for the
 *                   hang): the timer's window is still open.
 */

#define NCAPS 1

byte n_idle = 0;        /* rt.idle_word, low half: capabilities in idle() */
byte exits = 0;         /* rt.idle_word, high half: exits from idle()     */
bit parked = 0;         /* rt.ticker_parked                               */
bit quit = 0;           /* Ticker::quit_                                  */
byte inbox = 0;         /* threads sent to the capability, not yet taken  */
bit timer_pending = 1;  /* T's sleep is in the IO manager's heap          */
bit blocked = 0;        /* T blocked on the mvar for good                 */
bit raised = 0;         /* deadlock detection raised T; not yet run       */
byte deadlocks = 0;     /* deadlocks broken                               */
bit done = 0;           /* T finished                                     */

/* The IO manager: T's timer fires; T goes to the capability's inbox (the
 * capability, idle, watches it: Note [Sleeping capabilities]). */
active proctype IoManager() {
  atomic { timer_pending = 0; inbox++ }
}

/* The capability's Task: idle() until its inbox has a thread, leave idle
 * (the RMW, then the look at ticker_parked), run T one step. */
active proctype Capability() {
  do
  :: atomic { n_idle++ };                           /* idle_word.fetch_add(1) */
     if
     :: done -> break                                /* nothing more to run */
     :: inbox > 0 -> skip
     fi;
#ifdef BROKEN_WAKE
     if
     :: parked -> parked = 0                         /* futex_wake */
     :: else -> skip
     fi;
     atomic { n_idle--; exits++ };
#else
     atomic { n_idle--; exits++ };                   /* += kIdleExit - 1 */
     if
     :: parked -> parked = 0                         /* futex_wake */
     :: else -> skip
     fi;
#endif
     /* The scheduler runs T: woken by its timer, or raised. */
     atomic {
       inbox--;
       if
       :: raised && deadlocks >= 2 -> raised = 0; done = 1   /* T returns */
       :: else -> raised = 0; blocked = 1                    /* takes the empty mvar */
       fi
     }
  od
}

/* Ticker::loop. */
active proctype Ticker() {
  byte e_idle, e_exits;
  bit judged_idle, broke;
  do
  :: quit -> break
  :: else ->
     /* idle_seen = idle_word.load() */
     atomic { e_idle = n_idle; e_exits = exits };
     /* any_busy, deadlock_tick: quiet = every capability idle, nothing
      * queued, no timer pending; then every blocked thread is raised. */
     atomic {
       judged_idle = (n_idle == NCAPS);
       broke = 0;
       if
       :: n_idle == NCAPS && inbox == 0 && !timer_pending && blocked ->
            blocked = 0; raised = 1; inbox++; deadlocks++; broke = 1
       :: else -> skip
       fi
     };
#ifdef BROKEN_SKIP
     if
     :: broke -> judged_idle = 0
     :: else -> skip
     fi;
#endif
     if
     :: judged_idle ->
          parked = 1;
#if defined(BROKEN) || defined(BROKEN_SKIP)
          if
          :: n_idle == NCAPS ->
#else
          if
          :: n_idle == e_idle && exits == e_exits && e_idle == NCAPS ->
#endif
parking:
               (parked == 0 || quit)
          :: else -> skip
          fi;
          parked = 0
     :: else -> skip
     fi
  od
}

/* Shutdown: once T has finished, stop() the ticker (quit, then unpark). */
active proctype Shutdown() {
  done;
  quit = 1;
  parked = 0
}

active proctype Checker() {
  timeout -> assert(done && quit)
}
