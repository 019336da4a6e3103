// dump.cpp - the thread dump (Go's goroutine dump, GHC's printAllThreads):
// one line per live green thread, found through each capability's list of
// the threads it is home to (Capability::all_head).
//
// What a line says, and where it comes from:
//   * state: in a safe call (a Task's in_safe_call names it), running (a
//     capability's current), runnable, blocked, finished;
//   * what a blocked thread waits on: the IO manager's wait (Thread::io_wait:
//     a sleep's deadline, an fd), else the primitive and operation of its
//     mvar_core wait (Thread::wait_tag) and that core's address
//     (Thread::blocked_on), or a spark being run elsewhere, or shutdown;
//   * where: the capability that runs it next, or its Task when bound;
//   * stack bytes in use of its reservation, from the saved stack pointer
//     (a parked thread only: a running thread's is moving);
//   * how long since it last ran (switched away: Thread::last_ran_ns, on
//     the ticker's coarse clock, so accurate to a tick).
//
// Rejected: stopping the world for a consistent picture (as Go does).  A
// dump is asked for when something looks stuck or slow; stopping every
// capability needs every capability to reach a safe point, which a thread
// in a loop without one never does - the very case a dump must show.
#include "thread/dump.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "capability/capability.hpp"
#include "primitives/clock.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"

namespace capstan::rts {

// Note [A thread dump is a snapshot]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The dump reads fields that their owners write without synchronisation:
// a thread's state, why, capability, saved stack pointer, io_wait,
// wait_tag, blocked_on, last_ran_ns, and each capability's
// current.  It must: taking the owners' locks would need every owner to
// cooperate, and a dump is for when one does not.  So:
//  * Thread objects are never freed during a run (their slabs live as long
//    as the Runtime), and the home's all_lock, held while a list is walked,
//    keeps a thread from being unlinked and recycled under us: every
//    pointer followed is to a live Thread or Capability.  The dump never
//    follows blocked_on or waiter (the waiter is on the blocked thread's
//    stack and may be gone): it prints the address only, and the kind of
//    wait was copied into the Thread when it parked.  That address is the
//    primitive's own, the one the program holds: every primitive built on
//    detail::mvar_core declares its queue as its first member (a future's
//    queue is in the state it shares with its promise, so a future prints
//    that state's address).  Dump.NamesEachPrimitiveByItsOwnAddress checks
//    each.
//  * Each field is read once, with a relaxed atomic load of one aligned
//    word or byte (snap), so each value is one its owner wrote - but two
//    fields may be from different moments ("blocked" with the wait already
//    over).  A line describes a thread as of some instant near the dump,
//    not all lines the same instant.
//  * The loads are exempt from ThreadSanitizer (no_sanitize), since the
//    race is deliberate: the owners' plain stores stay plain, so the hot
//    paths pay nothing for dumps.

const char* what_name(std::uint8_t what, std::uint8_t op) noexcept {
  using W = detail::waiter;
  if (what == W::shared_mutex && op == W::read) return "shared_mutex lock_shared";
  switch (what) {
    case W::mvar: return "mvar";
    case W::chan: return "chan read";
    case W::mutex: return "mutex lock";
    case W::shared_mutex: return "shared_mutex lock";
    case W::condition_variable: return "condition_variable wait";
    case W::semaphore: return "semaphore acquire";
    case W::latch: return "latch wait";
    case W::barrier: return "barrier wait";  // arrive_and_wait or wait(token)
    case W::wait_group: return "wait_group wait";
    case W::future: return "future get or wait";
    case W::throw_to: return "throw_to, until its exception lands in the target,";
    case W::runtime_event: return "runtime event";
    case W::spark: return "spark get";
    default: return "blocking primitive";
  }
}

namespace {

const char* op_name(std::uint8_t op) {
  switch (op) {
    case detail::waiter::take: return "take";
    case detail::waiter::read: return "read";
    case detail::waiter::put: return "put";
    default: return "op";
  }
}

std::string ms_text(std::int64_t ns) {
  if (ns < 0) ns = 0;
  if (ns < 1'000'000) return fmt::format("{:.2f} ms", static_cast<double>(ns) / 1e6);
  if (ns < 10'000'000'000) return fmt::format("{} ms", ns / 1'000'000);
  return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9);
}

std::string bytes_text(std::size_t n) {
  if (n < 10 * 1024) return fmt::format("{} B", n);
  if (n < 10 * 1024 * 1024) return fmt::format("{} KiB", n / 1024);
  return fmt::format("{} MiB", n / (1024 * 1024));
}

// Who runs what, from the capabilities and Tasks (read once per dump).
struct Where {
  std::unordered_map<const Thread*, unsigned> running_on;   // thread -> capability
  std::unordered_map<const Thread*, unsigned> in_call;      // thread -> its Task's no
};

Where where_now() {
  Where w;
  for (Capability* c : rt.caps)
    if (const Thread* t = snap(c->current)) w.running_on[t] = c->no;
  std::lock_guard<std::mutex> g(rt.tasks_mu);
  for (const auto& task : rt.tasks)
    if (const Thread* t = task->in_safe_call.load(std::memory_order_relaxed)) w.in_call[t] = task->no;
  return w;
}

std::string describe(const Thread* t, const Where& w, std::int64_t now, std::int64_t coarse) {
  std::string line = thread_name(t);
  auto state = snap(t->state);
  Capability* cap = snap(t->cap);
  unsigned cap_no = cap ? cap->no : 0;
  bool started = snap(t->sp) != nullptr;
  auto call = w.in_call.find(t);
  auto run = w.running_on.find(t);
  if (call != w.in_call.end()) {
    line += fmt::format(": in a safe call on task {}", call->second);
  } else if (run != w.running_on.end() && state == ThreadState::running) {
    line += fmt::format(": running on capability {}", run->second);
  } else {
    switch (state) {
      case ThreadState::runnable:
        line += started ? fmt::format(": runnable on capability {}", cap_no)
                        : fmt::format(": runnable on capability {}, not started", cap_no);
        break;
      case ThreadState::running: line += fmt::format(": running on capability {}", cap_no); break;
      case ThreadState::blocked:
        line += fmt::format(": blocked on {}", waits_on(t, now));
        line += fmt::format(", capability {}", cap_no);
        break;
      case ThreadState::finished: line += ": finished"; break;
    }
  }
  if (snap(t->bound)) {
    // Task::no is written once, before the Task is published in rt.tasks.
    if (const Task* task = snap(t->bound_task)) line += fmt::format(", bound to task {}", task->no);
  } else if (snap(t->locked)) {
    line += ", locked to its capability";
  }
  if (snap(t->mask) != Mask::unmasked) line += ", exceptions masked";
  void* sp = snap(t->sp);
  void* lo = snap(t->stack_lo);
  bool parked = run == w.running_on.end() && call == w.in_call.end() && state != ThreadState::running;
  if (sp && lo && parked) {
    auto hi = static_cast<char*>(lo) + rt.arena.start_size(lo);  // Note [Stack colouring]
    auto used = static_cast<std::size_t>(hi - static_cast<char*>(sp));
    if (used <= rt.arena.size())
      line += fmt::format(", stack {} of {}", bytes_text(used), bytes_text(rt.arena.size()));
  }
  std::int64_t ran = snap(t->last_ran_ns);
  if (state != ThreadState::running && ran != 0)
    line += coarse > ran ? fmt::format(", last ran {} ago", ms_text(coarse - ran))
                         : std::string(", last ran within the last tick");
  return line;
}

void collect(const Where& w, std::int64_t now, bool blocked_only, std::vector<std::string>& out) {
  std::int64_t coarse = rt.coarse_now_ns.load(std::memory_order_relaxed);
  for (Capability* c : rt.caps) {
    c->all_lock.lock();
    for (const Thread* t = c->all_head; t; t = t->all_next) {
      if (blocked_only && snap(t->state) != ThreadState::blocked) continue;
      out.push_back(describe(t, w, now, coarse));
    }
    c->all_lock.unlock();
  }
}

}  // namespace

std::string thread_name(const Thread* t) {
  if (t->label && !t->label->empty()) return fmt::format("thread {} \"{}\"", t->id, *t->label);
  if (t->is_main) return fmt::format("thread {} (main)", t->id);
  return fmt::format("thread {}", t->id);
}

std::string waits_on(const Thread* t, std::int64_t now) {
  switch (snap(t->why)) {
    case WhyBlocked::not_blocked: return {};
    case WhyBlocked::on_shutdown: return "shutdown (waiting to be reclaimed)";
    case WhyBlocked::on_mvar: break;
  }
  std::int64_t arg = snap(t->io_arg);
  switch (snap(t->io_wait)) {
    case IoWait::sleep: return fmt::format("sleep_for, due in {}", ms_text(arg - now));
    case IoWait::fd_read: return fmt::format("fd {} to be readable", arg);
    case IoWait::fd_write: return fmt::format("fd {} to be writable", arg);
    case IoWait::close_fd: return fmt::format("close_fd of fd {}", arg);
    case IoWait::none: break;
  }
  std::uint8_t what = snap(t->wait_tag.what);
  if (what == detail::waiter::spark) return "a spark that another capability is running";
  const void* core = snap(t->blocked_on);
  if (what == detail::waiter::mvar)
    return fmt::format("mvar {} {}", op_name(snap(t->wait_tag.op)), fmt::ptr(core));
  return fmt::format("{} {}", what_name(what, snap(t->wait_tag.op)), fmt::ptr(core));
}

void dump_all_threads(std::FILE* f, const char* why) {
  std::int64_t now = now_ns();
  Where w = where_now();
  std::vector<std::string> lines;
  collect(w, now, false, lines);
  std::string out = fmt::format(
      "capstan: thread dump ({}) at {:.3f} s, -N{}: {} live green thread{}\n", why,
      static_cast<double>(now - std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    rt.started.time_since_epoch())
                                    .count()) /
          1e9,
      rt.n_caps, lines.size(), lines.size() == 1 ? "" : "s");
  for (Capability* c : rt.caps) {
    out += fmt::format("  capability {}: {}, {} in its run queue\n", c->no,
                       c->idle.load(std::memory_order_relaxed) ? "idle" : "busy",
                       c->run_queue.size());
  }
  for (const std::string& l : lines) out += "  " + l + "\n";
  std::fwrite(out.data(), 1, out.size(), f);
  std::fflush(f);
}

std::string blocked_threads_report(unsigned max_lines) {
  Where w = where_now();
  std::vector<std::string> lines;
  collect(w, now_ns(), true, lines);
  std::string out;
  unsigned n = 0;
  for (const std::string& l : lines) {
    if (n++ == max_lines) {
      out += fmt::format("\n  ... and {} more", lines.size() - max_lines);
      break;
    }
    out += "\n  " + l;
  }
  return out;
}

}  // namespace capstan::rts
