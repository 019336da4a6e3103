// deadlock.cpp - deadlock detection: when every thread is blocked and
// nothing can wake one, each gets blocked_indefinitely (GHC's
// resurrectThreads after a major GC).
//
// Note [Deadlock detection]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// GHC finds threads blocked on unreachable MVars with its GC.  C++ has no
// GC, so capstan asks a simpler question: can *anything* wake *any*
// thread?  A thread can be woken only by another green thread (none runs:
// every capability is idle with an empty inbox), by the IO manager (a
// sleep, fd wait or timer pending, a message on its way to it, or a
// wake-up on its way back from it: io_queued, io_parked, and Note
// [Wake-ups in flight] in io/wake_ups.cpp), by a thread returning from
// a safe call, by an in-call, or by an OS thread the runtime does not know
// (a std::thread holding a reference to an mvar may try_put into it at any
// time).  If none of them exists, the run can make no progress: every
// blocked thread - main included - is sent blocked_indefinitely, regardless
// of its mask (as GHC's throwToSingleThreaded), and unwinds; run() returns
// or throws as main does.
// The ticker checks on each tick that finds every capability idle, and
// acts only if the same quiet state (no context switch anywhere in
// between) held one tick earlier too: a capability between two states has
// settled by then.  (A request on its way to the IO thread is counted by
// io_queued until the IO thread has taken it, however far behind it is.)  At
// the default 10 ms tick that is 10-20 ms after the last thread blocked.
// The outside OS threads are looked for in /proc/self/task (Note [Looking
// for an outside thread]): the runtime names its own (capstan-task,
// capstan-tick, capstan-io, capstan-close, capstan-trace), and the thread that
// called run() is known; any other thread makes the detector stand down
// (`+RTS --deadlock-detection=on`, the default), counted in the statistics
// and re-checked while the run stays quiet: when every capability is idle,
// the parked ticker looks after 100 ms, then at doubling intervals up to
// 400 ms (kFirstRecheckNs, kMaxRecheckNs in runtime/ticker.cpp), a few
// wake-ups a second, each judging at once (the state it looks at is the
// one the stand-down confirmed, unless something moved); so a deadlock is
// found within about 400 ms after the last outside thread has gone.  `force` ignores
// outside threads (the program promises none can wake a green thread);
// `off` never checks.  Threads blocked while unwinding cannot be raised in
// (that would terminate()); they stay blocked.  The exception's message
// lists the blocked threads and what each waited on (as dump_threads
// does), so a program that dies of it says where it was stuck.
// During shutdown the same question, asked by shutdown_tick, tells
// shutdown when the threads it cannot kill (blocked while unwinding) can
// be abandoned at once (Note [Blocked while unwinding] in
// shutdown/shutdown.cpp).
#include "exception/deadlock.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capstan/errors.hpp"
#include "thread/dump.hpp"
#include "schedule/idle.hpp"
#include "io/io_manager.hpp"
#include "primitives/fault_injection.hpp"
#include "runtime/runtime.hpp"
#include "schedule/raise.hpp"

namespace capstan::rts {

namespace {

// Ticker-owned state.
std::uint64_t g_seen_switches = 0;
bool g_suspected = false;

std::uint64_t all_switches() {
  std::uint64_t n = 0;
  for (Capability* c : rt.caps) n += c->context_switches.get() + c->threads_created.get();
  return n;
}

// Shutdown's stuck check (shutdown_tick), ticker-owned.
std::uint64_t g_shutdown_seen = 0;
bool g_shutdown_suspected = false;

// Quiet: what a look at the run found.  quiet: nothing runs and nothing
// is known that could wake a thread (during shutdown, main's wait for the
// others counts as blocked); busy: something runs or will wake one, and
// only a capability leaving idle() can end that; unsettled: not quiet, but
// for a state that can end without one (Note [Stopping the ticker] in
// runtime/ticker.cpp).
enum class Quiet { quiet, busy, unsettled };

Quiet quiet_now() {
  // Every capability asleep in idle(), or free with nothing queued and no
  // sparks (resting, schedule/idle.hpp): a Task that ran a bound or
  // in-call thread leaves its capability free when the thread finishes,
  // and nothing may ever take it again.  (A safe call and an in-call in
  // progress are counted below; a capability changing hands has a queued
  // thread, or its giver switches before the next tick.)  See Note [Idle
  // is not asleep].
  for (Capability* c : rt.caps) {
    if (c->inbox.nonempty_seq_cst()) return Quiet::busy;  // work queued
    if (c->run_queue.size() != 0 || c->sparks.size() != 0) return Quiet::busy;
    switch (c->hold.load(std::memory_order_seq_cst)) {
      case Hold::sleeping: break;
      case Hold::free:
        if (!resting(c)) return Quiet::busy;
        break;
      case Hold::held:  // running, or idle and still looking (it may sleep without leaving)
        return c->idle.load(std::memory_order_relaxed) ? Quiet::unsettled : Quiet::busy;
    }
  }
  std::size_t queued = io_queued();  // before io_parked: Note [Messages in flight]
  if (io_parked() != 0) return Quiet::busy;  // its end wakes a thread through an inbox
  // A cancel drains, and an in-call (dump_threads) ends, without any
  // capability leaving idle().
  if (queued != 0 || process.incalls.load(std::memory_order_seq_cst) != 0) return Quiet::unsettled;
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (auto& task : rt.tasks)
    if (task->in_safe_call.load(std::memory_order_relaxed)) return Quiet::busy;
  return Quiet::quiet;
}

// Note [Idle is not asleep]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A capability in idle() may still hold work nobody else can see: a spark
// it took from its own pool or was answered by a victim (in ask(), or
// turned into a thread not yet created), threads it has just stolen from a
// stalled capability on their way to its run queue.  Nothing of that is
// counted as a switch until the thread runs, so if the capability's OS
// thread were preempted there for two ticks, a detector that counted idle
// capabilities as quiet would raise blocked_indefinitely in a thread that
// work was about to wake (a maker in get(), a taker whose putter was just
// stolen).  So only a capability asleep (Hold::sleeping: it looked,
// found nothing and parked) counts, with an empty run queue and spark
// pool; one still looking is busy.  An idle capability sleeps within a
// few spins of kSpinNs when there is nothing to find (schedule/idle.cpp;
// it never sleeps holding sparks, Note [A backlog of stolen sparks is not
// speculative]), so a real deadlock is still found at the next ticks.
// Rejected: a "taking work" flag set around every hunt and steal - more
// stores on the idle path, and every new way to take work would need one.

// Note [Sanitizer threads]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// ThreadSanitizer runs a background thread of its own, started by the
// process's first pthread_create and unnamed (its comm is the program's).
// It cannot wake a green thread, but counted as an outside thread it would
// make the detector stand down for ever in every TSan build.  So a TSan
// build forces that thread into being while the library loads (by creating
// and joining a thread before main runs, when no user thread exists yet)
// and records the threads that exist then as the sanitizer's own.  Other
// builds have no such thread and record nothing.  (A TSan build dlopen()ed
// after the program started threads would wrongly record those too; the
// sanitizer builds here link the library normally.)
#if defined(__SANITIZE_THREAD__)
constexpr int kMaxSanitizerThreads = 4;
long g_sanitizer_tids[kMaxSanitizerThreads] = {};

__attribute__((constructor)) void note_sanitizer_threads() {
  std::thread([] {}).join();
  DIR* d = opendir("/proc/self/task");
  if (!d) return;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    long tid = std::strtol(e->d_name, nullptr, 10);
    if (tid != getpid() && n < kMaxSanitizerThreads) g_sanitizer_tids[n++] = tid;
  }
  closedir(d);
}
#endif

bool sanitizer_thread(long tid) {
#if defined(__SANITIZE_THREAD__)
  for (long s : g_sanitizer_tids)
    if (s == tid) return true;
#else
  (void)tid;
#endif
  return false;
}

// Note [Looking for an outside thread]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each stand-down check lists /proc/self/task and reads thread names, and
// while an outside thread lives the parked ticker repeats it a few times a
// second (Note [Deadlock detection]).  It wants only whether one outside
// thread exists, so it stops at the first, and it looks at the newest
// threads first: the runtime makes most of its own when run() starts
// (its Tasks, the ticker, the IO thread), so its OS threads hold the
// lowest ids, and an outside one - the program's std::thread, a library's
// - is usually newer.  A name is read with open and read into a buffer on
// the stack, not stdio (no allocation per thread).  On `idle 1` (the
// runtime idle for a second while the program's alarm thread sleeps) a
// check read every thread's name, 2 at -N2 and 5 at -N8, and now reads
// one (strace); interleaved against the commit before, medians of 5:
// -N2 0.108 -> 0.088 % of a CPU, -N8 0.159 -> 0.139 % (with the check off,
// `--deadlock-detection=off`, 0.030-0.041 and 0.037-0.080 %: the rest is
// the ticker's wake-ups and the directory listing).  An outside thread
// older than the runtime's is still found, after the runtime's own names
// are read (Deadlock.StandsDownForAnOutsideThreadOlderThanTheRuntimes).

// is_runtime_thread: is the OS thread `tid` one the runtime made (named
// capstan-*)?  A thread that has just exited is not counted as outside.
bool is_runtime_thread(long tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // it has just exited
  char comm[32] = {};
  ssize_t got = read(fd, comm, sizeof comm - 1);
  close(fd);
  if (got < 0) return true;  // exited between the open and the read
  return std::strncmp(comm, "capstan-", 8) == 0;
}

// outside_thread_exists: does this process have an OS thread the runtime
// did not make?  See Note [Sanitizer threads] and Note [Looking for an
// outside thread].
bool outside_thread_exists() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return true;  // cannot tell: assume the worst
  std::vector<long> tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    long tid = std::strtol(e->d_name, nullptr, 10);
    if (tid == rt.main_tid || sanitizer_thread(tid)) continue;
    tids.push_back(tid);
  }
  closedir(d);
  std::sort(tids.begin(), tids.end(), std::greater<>());  // newest first
  for (long tid : tids)
    if (!is_runtime_thread(tid)) return true;
  return false;
}

// The deadlock report names at most this many blocked threads.
constexpr unsigned kReportLines = 20;

// break_deadlock sends blocked_indefinitely to every thread blocked on an
// mvar.  Every capability is idle, so nobody is inside an mvar operation:
// the wait locks can be turned on without waiting (Note [Wait locks]).
unsigned break_deadlock() {
  rt.waits_need_lock.store(true, std::memory_order_seq_cst);
  rt.wait_locks_on.store(true, std::memory_order_release);
  // Every blocked thread gets the same report: all of them are involved,
  // since nothing outside them could wake any (thread/dump.hpp).  The
  // report's lines say what each waited on (an mvar, a chan, a mutex, ...),
  // so the first line names no primitive.
  const std::exception_ptr ex = std::make_exception_ptr(blocked_indefinitely(
      "thread blocked indefinitely: deadlock; the blocked threads were:" +
      blocked_threads_report(kReportLines)));
  // Note [Breaking a deadlock]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~
  //  * A thread blocked in throw_to whose target is raised here is left
  //    alone: once the target has taken its exception - killed, or ending
  //    as it unwinds - the throw returns (GHC's resurrectThreads leaves
  //    every thread blocked on a throw alone).  Raised, it saw
  //    blocked_indefinitely instead of its kill landing: ~async, whose
  //    cancel kills under uninterruptible_mask and is noexcept,
  //    terminated the program.  So is a thrower whose target is a thrower
  //    left alone: that one returns, and leaves its mask or blocks
  //    interruptibly later, where the throw lands - or blocks for good,
  //    and the next deadlock is found.  Every other thrower is raised:
  //    one in a cycle (two masked threads throwing to each other), in a
  //    chain that ends in one, or in a chain ending in a thread no
  //    exception can reach (unwinding).  Not just one thread per cycle,
  //    though that would end the cycle: a raised thrower need not ever
  //    unmask.  async's cancel kills its child under uninterruptible_mask
  //    and, raised, waits (still masked) for the child's report; a child
  //    that was throwing to it under its own mask, left alone because its
  //    target was raised, never took anything, and every later deadlock
  //    raised the canceller again and again
  //    (Deadlock.ACancelInAThrowCycleWithItsChildReturns, under a rule
  //    that raised one thrower per cycle, tried and withdrawn).  A thrower into
  //    a cycle is raised with it, though its target may take its throw
  //    after all: it then hears of the deadlock too (throw_to's caveat).
  //    So the non-throwers go first; then the throwers left alone, grown
  //    from the raised targets back along the chains; then the rest.
  //  * Every victim is dequeued before any is woken: a victim woken early
  //    could run on another capability and unwind, releasing a mutex or
  //    filling an mvar that another victim waits on, which then took the
  //    mutex and carried on instead of hearing of the deadlock (2 runs in
  //    200 at -N4).
  detail::wake_list woken;
  std::unordered_set<const Thread*> raised;
  auto raise = [&](Thread* t) {
    ThrowMsg m;
    m.ex = ex;
    if (post_throw(t, t->live_id.load(std::memory_order_relaxed), &m, /*ignore_mask=*/true,
                   &woken) == Posted::raised)
      raised.insert(t);
  };
  // Every capability is idle: the waits' tags and waiters are settled, and
  // no thread ends before we wake the victims (so the pointers below stay
  // good once all_lock is let go).
  struct Thrower {
    Thread* thread;
    const Thread* target;
  };
  std::vector<Thrower> throwers;
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (Thread* t = c->all_head; t; t = t->all_next) {
      if (snap(t->wait_tag.what) == detail::waiter::throw_to) {
        detail::waiter* w = snap(t->waiter);
        throwers.push_back({t, w ? static_cast<const Thread*>(w->slot) : nullptr});
      } else {
        raise(t);
      }
    }
    c->all_lock.unlock();
  }
  // Left alone: the throwers reached from a raised thread backwards along
  // the throw edges (each thread and edge once, however long the chains).
  std::unordered_multimap<const Thread*, const Thread*> by_target;
  for (const Thrower& th : throwers)
    if (th.target) by_target.emplace(th.target, th.thread);
  std::unordered_set<const Thread*> alone;
  std::vector<const Thread*> frontier(raised.begin(), raised.end());
  while (!frontier.empty()) {
    const Thread* x = frontier.back();
    frontier.pop_back();
    auto [from, to] = by_target.equal_range(x);
    for (auto it = from; it != to; ++it)
      if (alone.insert(it->second).second) frontier.push_back(it->second);
  }
  for (const Thrower& th : throwers)
    if (!alone.count(th.thread)) raise(th.thread);
  auto n = static_cast<unsigned>(raised.size());
  // Counted before anyone is woken: a victim that reads statistics() once
  // it has caught blocked_indefinitely must find this deadlock counted
  // (the wake-up's push to an inbox orders the add before the victim's
  // read).  Counted after the wake-ups, the ticker preempted between the
  // two under load let main see deadlocks_detected == 0
  // (Deadlock.EveryBlockedThreadIsWoken/N2, under ThreadSanitizer).
  if (n != 0) rt.deadlocks_detected.add();
  woken.wake_all();
  if (int us = fault_injection::deadlock_wake_delay_us.load(std::memory_order_relaxed)) [[unlikely]]
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  return n;
}

}  // namespace

namespace {
// quiet: as quiet_now, outside shutdown (shutdown has its own check).
Quiet quiet() {
  if (rt.shutting_down.load(std::memory_order_acquire)) return Quiet::busy;
  return quiet_now();
}
}  // namespace

namespace {
// confirmed: the second quiet tick in a row with no context switch between
// them confirms what the first suspected; otherwise this tick suspects.
bool confirmed(bool& suspected, std::uint64_t& seen) {
  std::uint64_t sw = all_switches();
  if (!suspected || sw != seen) {
    suspected = true;
    seen = sw;
    return false;
  }
  suspected = false;
  return true;
}
}  // namespace

void deadlock_reset() { g_suspected = false; }

DeadlockTick deadlock_recheck() {
  // The stand-down confirmed a quiet state (g_seen_switches) and nothing
  // has woken the ticker since: a tick that still sees that state needs
  // no second tick to confirm it (confirmed() compares the switch count).
  g_suspected = true;
  return deadlock_tick();
}

DeadlockTick shutdown_tick() {
  if (rt.opts.deadlock_detection == options::deadlock::off || quiet_now() != Quiet::quiet) {
    g_shutdown_suspected = false;
    return DeadlockTick::none;
  }
  if (!confirmed(g_shutdown_suspected, g_shutdown_seen)) return DeadlockTick::suspected;
  if (rt.opts.deadlock_detection == options::deadlock::on && outside_thread_exists())
    return DeadlockTick::stood_down;  // the grace period decides
  rt.shutdown_stuck.store(true, std::memory_order_seq_cst);
  return DeadlockTick::broken;
}

DeadlockTick deadlock_tick() {
  if (rt.opts.deadlock_detection == options::deadlock::off) return DeadlockTick::none;
  if (Quiet q = quiet(); q != Quiet::quiet) {
    g_suspected = false;
    return q == Quiet::unsettled ? DeadlockTick::unsettled : DeadlockTick::none;
  }
  if (!confirmed(g_suspected, g_seen_switches)) return DeadlockTick::suspected;
  if (rt.opts.deadlock_detection == options::deadlock::on && outside_thread_exists()) {
    rt.deadlock_stood_down.add();
    return DeadlockTick::stood_down;
  }
  if (break_deadlock() == 0) return DeadlockTick::none;  // all blocked while unwinding
  return DeadlockTick::broken;
}

}  // namespace capstan::rts
