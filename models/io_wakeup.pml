/* io_wakeup.pml - green threads handing requests to the IO thread and
 * being woken by it; cancellation; shutdown's last drain.
 *
 * Mirrors Note [No lost wake-ups] in rts/io/io_manager.cpp (all three
 * hand-offs), with Note [Requests are shared], Note [Wake last] and Note
 * [Pushing from any thread] of the same file: IoManager::push
 * (rts/io/io_thread.hpp: push onto the MpscStack, uv_async_send only by
 * the pusher that found it empty), on_async (the stop flag, then drain),
 * drain/handle/finish/flush_wakes, enter_gate/leave_gate and shutdown;
 * io_sleep/await/the cancel message in rts/io/entry_points.cpp.
 *
 * Parties: green threads G1 and G2 each sleep once (io_sleep: a Request
 * with two references, the submit message, then a take on the request's
 * one-shot mvar); G2 may be killed while it waits (its take throws and it
 * pushes the request's cancel message, carrying its reference); a plain OS
 * thread X sends one fd message through the gate (io_close_fd_nowait) at
 * any time, also during shutdown; the IO thread runs the libuv loop (async
 * callbacks and the timer callback); shutdown runs once G1 and G2 have
 * stopped.
 *
 * Abstractions.  The queue is an array used as the MpscStack (push on
 * top, take_all takes everything and handles it bottom first).  libuv is
 * its documented contract: uv_async_send sets the handle's pending flag
 * (and wakes the loop); the loop clears the flag and then runs the
 * callback, so a callback runs at least once after every send; sends
 * before the clear coalesce into one callback.  A timer is armed or not;
 * the loop may fire any armed timer at any moment (time is not modelled).
 * The request's mvar is a one-shot box: try_put fills it, the take empties
 * it, or the taker is killed while it is empty - exactly one of the two,
 * by the mvar's lock (mvar_block.pml checks that protocol).  Reference
 * counts are counted; a request is freed when its count reaches zero, and
 * every later touch asserts it is not.
 *
 * Memory model: sequential consistency.  The queue head changes only by
 * RMWs (the pushers' CASes, the IO thread's exchange), totally ordered in
 * C++, and whether a pusher sends is decided by what its own CAS read; the
 * gate is one word changed only by RMWs; the stop flag is a seq_cst store
 * before the send and a seq_cst load in the callback that send causes (the
 * send and the loop's wake-up order them); Request::done and the timer are
 * the IO thread's own.  No argument here needs a store buffer.
 *
 * Properties.
 *  - No lost wake-up: G1 and G2 always finish (woken by the put, or
 *    killed); every request is freed exactly once, never touched after;
 *    no invalid end state (assertions at timeout).
 *  - Note [Pushing from any thread]: no message reaches the queue after
 *    the IO thread's last drain (shutdown's check after join).
 *
 * Broken variants:
 *   -DBROKEN        the pusher decides to send before it pushes (it looks
 *                   at the head, sends if it is empty, then pushes): a push
 *                   can land on a stack the callback has just emptied, with
 *                   no send after it - its thread sleeps for ever.
 *   -DBROKEN_ORDER  on_async drains first and reads the stop flag after:
 *                   a message pushed between the two is never drained.
 *   -DBROKEN_GATE   shutdown closes the gate but does not wait for the
 *                   pushers inside it.
 */

#define G1  0
#define G2  1
#define XR  2          /* X's fd request */
#define NR  3

/* messages: 2*r = r's submit, 2*r + 1 = r's cancel */
#define SUBMIT(r) (2 * (r))
#define CANCEL(r) (2 * (r) + 1)
#define QMAX 6

byte queue[QMAX];      /* the MpscStack: queue[0] is the bottom */
byte qlen;
byte batch[QMAX];      /* what the IO thread's take_all took [IO thread] */
bool pending;          /* uv_async_t's pending flag */
bool closed;           /* stop_everything closed the handles */
bool io_exited;
bool stopping;         /* IoManager::stopping_ */
bool gate_open = 1;    /* kGateOpen */
byte gate_n;           /* pushers inside the gate */

byte refs[NR];
bool freed[NR];
bool done[NR];         /* Request::done [IO thread] */
bool timer[NR];        /* in the timer heap [IO thread] */
bool box[NR];          /* the request's mvar<int>: full */
bool waker[NR];        /* a queued wake-up (wakes_) holds a reference */
bool g_done[2];
bool x_sent;

inline touch(r) {
  assert(!freed[r])
}
inline release(r) {
  atomic {
    touch(r);
    refs[r]--;
    if
    :: refs[r] == 0 -> freed[r] = 1
    :: else -> skip
    fi
  }
}

/* IoManager::push: the CAS, and a send only if the stack was empty. */
inline push(m, was_empty) {
#ifdef BROKEN
  was_empty = (qlen == 0);             /* a look at the head, then send... */
  if
  :: was_empty -> pending = 1          /* uv_async_send */
  :: else -> skip
  fi;
  atomic { queue[qlen] = m; qlen++ }   /* ... then push */
#else
  atomic { was_empty = (qlen == 0); queue[qlen] = m; qlen++ };
  if
  :: was_empty -> pending = 1          /* uv_async_send */
  :: else -> skip
  fi
#endif
}

/* io_sleep on green thread g (request g): push the submit, await. */
proctype Green(byte g) {
  bool e;
  push(SUBMIT(g), e);
  /* await: r->box.take() */
  if
  :: atomic { box[g] -> box[g] = 0 } ->
       release(g)                       /* the take returned: our reference */
  :: g == G2 && !box[g] ->
       /* killed while it waits (the mvar's lock makes this exclusive
        * with the put): the cancel message carries our reference */
       push(CANCEL(g), e)
  fi;
  g_done[g] = 1
}

/* io_close_fd_nowait from a plain OS thread: through the gate. */
active proctype X() {
  bool e, admitted;
  atomic {
    gate_n++;                           /* enter_gate: fetch_add */
    admitted = gate_open;
    if
    :: !admitted -> gate_n--
    :: else -> skip
    fi
  };
  if
  :: admitted ->
       refs[XR] = 1;                    /* new_fd_request: the IO thread's only */
       push(SUBMIT(XR), e);
       x_sent = 1;
       gate_n--                         /* leave_gate */
  :: else ->
       freed[XR] = 1                    /* no request: close(2) directly */
  fi
}

/* finish (IO thread): once; unlink the timer; queue the wake-up with its
 * own reference; drop the IO thread's reference. */
inline finish(r, wake) {
  touch(r);
  if
  :: !done[r] ->
       done[r] = 1;
       timer[r] = 0;
       if
       :: wake -> refs[r]++; waker[r] = 1
       :: else -> skip
       fi;
       release(r)
  :: else -> skip
  fi
}
/* flush_wakes: the last thing each callback does (Note [Wake last]). */
inline flush_wakes(i) {
  i = 0;
  do
  :: i < NR && waker[i] ->
       waker[i] = 0;
       touch(i);
       if
       :: !box[i] -> box[i] = 1         /* try_put */
       :: else -> skip
       fi;
       release(i)                        /* the wake-up's reference */
  :: i < NR && !waker[i] -> i++
  :: i == NR -> break
  od
}
/* handle one message. */
inline handle(m, r) {
  r = m / 2;
  if
  :: m % 2 == 0 && r != XR -> touch(r); timer[r] = 1      /* sleep: add_timer */
  :: m % 2 == 0 && r == XR -> finish(r, 0)                /* do_close */
  :: m % 2 == 1 -> finish(r, 0); release(r)               /* cancel */
  fi
}
/* drain: take_all (exchange), handle bottom first. */
inline drain(n, i, r) {
  atomic {
    n = qlen;
    i = 0;
    do
    :: i < n -> batch[i] = queue[i]; queue[i] = 0; i++
    :: else -> break
    od;
    qlen = 0
  };
  i = 0;
  do
  :: i < n -> handle(batch[i], r); i++
  :: else -> break
  od
}

/* The IO thread: uv_run. */
active proctype IoThread() {
  byte n, i, r;
  bool stop;
  do
  :: atomic { pending && !closed -> pending = 0 } ->
       /* on_async */
#ifdef BROKEN_ORDER
       drain(n, i, r);
       stop = stopping;
#else
       stop = stopping;
       drain(n, i, r);
#endif
       if
       :: stop ->
            /* stop_everything: drop every request without a wake-up */
            i = 0;
            do
            :: i < NR && timer[i] -> finish(i, 0); i++
            :: i < NR && !timer[i] -> i++
            :: i == NR -> break
            od;
            closed = 1
       :: else -> skip
       fi;
       flush_wakes(i)
  :: atomic { (timer[G1] || timer[G2]) && !closed } ->
       /* on_timer: the due timers fire */
       i = 0;
       do
       :: i < NR && timer[i] -> finish(i, 1); i++
       :: i < NR && !timer[i] -> i++
       :: i == NR -> break
       od;
       flush_wakes(i)
  :: closed -> break
  od;
  io_exited = 1
}

/* IoManager::shutdown, after every green thread stopped. */
active proctype Shutdown() {
  (g_done[G1] && g_done[G2]);
  gate_open = 0;                        /* fetch_and(~kGateOpen) */
#ifndef BROKEN_GATE
  (gate_n == 0);                        /* wait out the pushers inside */
#endif
  stopping = 1;
  pending = 1;                          /* uv_async_send */
  io_exited;                            /* thread_.join() */
  assert(qlen == 0)                     /* no message after the last drain */
}

active proctype Checker() {
  byte i;
  timeout ->
  assert(g_done[G1] && g_done[G2] && io_exited);
  i = 0;
  do
  :: i < NR -> assert(freed[i] && refs[i] == 0); i++
  :: else -> break
  od
}

init {
  atomic {
    refs[G1] = 2; refs[G2] = 2;         /* the green thread's and the IO thread's */
    run Green(G1);
    run Green(G2)
  }
}
