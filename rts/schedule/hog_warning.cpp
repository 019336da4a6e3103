// hog_warning.cpp - the ticker names, once, a thread that has held its
// capability for longer than +RTS --warn-hog=<ms> (default 100 ms) without
// reaching a safe point while other threads waited for that capability.
//
// Note [Warning about a hog]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A loop with no runtime call in it never reaches a safe point, so the
// timeslice cannot take the capability back: the threads queued behind it
// wait (at -N1, for as long as it runs; at -N2 and up, until an idle
// capability takes them: Note [Stealing from a stalled capability]).  The
// fix is in the program - a yield_point() in the loop - so the runtime
// says so, as Go's race detector or GHC's -fno-omit-yields advice would.
// The ticker already wakes every tick; on each it reads, for each busy
// capability, its sched_epoch (one more per scheduling decision) and how
// many threads wait in its run queue and inbox.  A capability whose epoch
// has not moved for warn_hog while at least one thread waited is running a
// hog: its current thread (a racy read, Note [A thread dump is a
// snapshot]; the epoch re-read after it confirms the thread was running
// all along) is named on stderr with the advice, once per thread.
// No false alarms: a thread that reaches safe points gives the capability
// up within a timeslice of the ticker's request, so the limit is at least
// a timeslice and two ticks; and the stall must have been seen by as many
// ticks as the limit holds periods, so a ticker that was itself kept off
// the CPU for a while (which also delays the timeslice's end) blames no one.
// Nor does a capability whose own OS thread the kernel is not running:
// with more capabilities than CPUs (-N4 on two cores) an OS thread is
// routinely kept off the CPU for a few ms in the middle of an ordinary
// thread's run, and its epoch stands still just as a hog's does.  But a
// thread stuck in a plain blocking call (a read(2), a std::mutex, a sleep)
// holds its capability as surely as a loop does, while using no CPU.  So
// once a stalled capability has a thread waiting, the warner notes, for
// the OS thread holding it (Task::os_tid), its CPU time (its thread CPU
// clock) and how long it has been runnable but queued for a CPU (the
// second field of /proc/self/task/<tid>/schedstat).  At the limit it looks
// at that OS thread's state (/proc/.../stat):
//  * asleep in the kernel (S or D): the time since, less the time queued
//    since, was the thread's own - named, with the advice to make blocking
//    calls through safe_call.  The kernel adds a queued stretch to
//    schedstat only when it ends, so this is exact for a sleeper only;
//  * running or queued (R): its CPU time since was its own, up to date
//    even in the middle of a stretch on or off the CPU - named, with the
//    advice to add yield_point(), once it reaches the limit (less a
//    period: the readings are up to a period late).
// Rejected: the CPU clock alone, which never named a blocking call; and
// schedstat alone, which misses the stretch a queued thread is in.  Where
// neither can be read (an emulator; no fd to spare) the wall-clock rule
// alone decides, as before.  Cost: nothing on the scheduler's paths; a few
// loads per capability per tick; a clock read and three system calls
// (open, read, close) when a stalled capability first has a waiter, and
// about twice that on each tick once the limit has passed.
// Rejected: a check in the scheduler (it is exactly what does not run
// during a hog), and a timer per pick (a clock read on every switch).
// The runtime's own long loops are not the program's to fix: a latch,
// barrier or notify_all that releases 400,000 threads spends 190 ms in
// wake_list::wake_rest, and the warning used to tell the program to add a
// yield_point() it has no loop for.  Each loop of the runtime's over
// kLongLoop (1024) threads or more sets the capability's runtime_loop from
// its kLongLoop-th thread until it ends, and the warner restarts its clock
// while it is set, so only time spent in the program's code counts:
//  * a wake_list collecting and waking threads (the serving, under the
//    latch's or mvar's lock, is as long as the wake: 50,000 threads
//    released by one count_down held -N1's capability 21 ms);
//  * an inbox drain (those threads arriving on another capability: the
//    warning named whichever thread had last run there);
//  * push_work handing half of a long run queue to an idle capability;
//  * a thread waiting for a primitive's lock that such a loop holds
//    (mvar_core::lock_slow, once it has spun kSpinTurns turns);
//  * a capability's stack pool calling into the shared arena (its lock,
//    mmap, madvise: several ms each at -N4 on two cores, where the TLB
//    shoot-downs wait for descheduled CPUs).
// Each sets the mark with a RuntimeWork (primitives/runtime_work.hpp) where
// it can, so that an inner mark never clears an outer one.
#include "schedule/hog_warning.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "capability/capability.hpp"
#include "primitives/clock.hpp"
#include "primitives/say.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"
#include "thread/dump.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

namespace {

// read_task_file reads /proc/self/task/<tid>/<what> into buf (NUL-ended);
// false if it cannot (no such thread, no such file, no fd to spare).
bool read_task_file(int tid, const char* what, char* buf, std::size_t size) {
  if (tid <= 0) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", tid, what);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, buf, size - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// thread_cpu_ns is the CPU time of the OS thread `tid` of this process, or
// -1 if it cannot be read: glibc's pthread_getcpuclockid encoding of a
// thread CPU clock (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)), without a
// pthread_t that would have to outlive the Task.  Up to date even while
// the thread runs.
std::int64_t thread_cpu_ns(int tid) {
  if (tid <= 0) return -1;
  clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6u);
  timespec ts{};
  if (::clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// queued_ns is how long the OS thread `tid` has spent runnable but waiting
// for a CPU (the second field of its schedstat), or -1 if unknown.  The
// kernel adds a wait when it ends: exact for a thread asleep now, short of
// the current wait for one still queued.
std::int64_t queued_ns(int tid) {
  char buf[128];
  unsigned long long on_cpu = 0, queued = 0;
  if (!read_task_file(tid, "schedstat", buf, sizeof buf) ||
      std::sscanf(buf, "%llu %llu", &on_cpu, &queued) != 2)
    return -1;
  return static_cast<std::int64_t>(queued);
}

// blocked_in_kernel: is the OS thread `tid` asleep in a system call (state
// S or D in its stat), rather than running or runnable?
bool blocked_in_kernel(int tid) {
  char buf[512];
  if (!read_task_file(tid, "stat", buf, sizeof buf)) return false;
  const char* paren = std::strrchr(buf, ')');  // the name may hold spaces and parentheses
  return paren && paren[1] == ' ' && (paren[2] == 'S' || paren[2] == 'D');
}

}  // namespace

void HogWarner::tick(std::int64_t period_ns) {
  auto limit_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(rt.opts.warn_hog).count();
  if (limit_ns == 0) return;
  auto slice_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(rt.opts.timeslice).count();
  limit_ns = std::max(limit_ns, slice_ns + 2 * period_ns);
  auto ticks_needed = static_cast<std::uint64_t>(std::max<std::int64_t>(2, limit_ns / period_ns));
  if (seen_.size() != rt.n_caps) seen_.assign(rt.n_caps, Seen{});
  std::int64_t now = now_ns();
  for (Capability* c : rt.caps) {
    Seen& s = seen_[c->no];
    // acquire: pairs with the owner's release increment, so the current
    // thread read below is at least as new as this decision.
    std::uint64_t epoch = c->sched_epoch.load(std::memory_order_acquire);
    // A wake of thousands of threads is the runtime's loop, not the
    // program's: its time does not count (see the Note).
    if (c->idle.load(std::memory_order_relaxed) || epoch != s.epoch || s.since_ns == 0 ||
        c->runtime_loop.load(std::memory_order_relaxed)) {
      s = Seen{epoch, now};
      continue;
    }
    ++s.ticks;
    std::uint64_t waiting = c->run_queue.size() + (c->inbox.maybe_nonempty() ? 1 : 0);
    if (waiting > s.most_waiting) s.most_waiting = waiting;
    if (s.most_waiting != 0 && s.tid == 0) {  // note its OS thread's wait for a CPU (see the Note)
      // acquire: pairs with take_capability's release, so the Task's
      // os_tid (written when it was bound to its OS thread) is visible.
      Task* task = c->running_task.load(std::memory_order_acquire);
      s.tid = task ? task->os_tid.load(std::memory_order_relaxed) : -1;
      s.cpu_ns = thread_cpu_ns(s.tid);
      s.queued_ns = queued_ns(s.tid);
      s.base_ns = now;
    }
    if (s.most_waiting == 0 || now - s.since_ns < limit_ns || s.ticks < ticks_needed) continue;
    // Not the time the kernel kept its OS thread off every CPU (see the Note).
    bool blocked = blocked_in_kernel(s.tid);
    if (blocked && s.queued_ns >= 0) {  // asleep now: all but its queued time was its own
      std::int64_t queued = queued_ns(s.tid);
      if (queued >= 0 && now - s.base_ns - (queued - s.queued_ns) < limit_ns - period_ns) continue;
    } else if (!blocked && s.cpu_ns >= 0) {  // running or queued now: its CPU time was its own
      std::int64_t cpu = thread_cpu_ns(s.tid);
      if (cpu >= 0 && cpu - s.cpu_ns < limit_ns - period_ns) continue;
    }
    Thread* t = snap(c->current);
    if (!t) continue;
    std::uint64_t id = snap(t->id);
    if (c->sched_epoch.load(std::memory_order_acquire) != epoch) continue;  // it moved on
    if (!warned_.insert(id).second) continue;
    // Its label is read under its home's all_lock, and only while it is
    // still on that list (a thread that finished meanwhile may have been
    // recycled): a walk of the list, once per warning.
    std::string name = fmt::format("thread {}", id);
    Capability* home = snap(t->home);
    home->all_lock.lock();
    for (const Thread* x = home->all_head; x; x = x->all_next) {
      if (x == t) {
        if (x->id == id) name = thread_name(t);
        break;
      }
    }
    home->all_lock.unlock();
    const char* advice = blocked
                             ? "it is blocked in the operating system: make blocking calls "
                               "through capstan::safe_call"
                             : "call capstan::yield_point() in its long loops";
    say("capstan: {} has held capability {} for {} ms without reaching a safe point while "
               "{} other thread{} waited for it; {} "
               "(named once; +RTS --warn-hog=<ms> sets the limit, 0 silences it)\n",
               name, c->no, (now - s.since_ns) / 1'000'000, s.most_waiting,
               s.most_waiting == 1 ? "" : "s", advice);
  }
}

}  // namespace capstan::rts
