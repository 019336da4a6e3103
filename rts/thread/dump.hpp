// dump.hpp - the thread dump: every green thread, what it is doing, what it
// waits on, where it runs and how long since it ran (Go's goroutine dump on
// SIGQUIT, GHC's printAllThreads).  See Note [A thread dump is a snapshot]
// in thread/dump.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace capstan::rts {

struct Thread;

// snap reads a field that its owner writes without synchronisation, for a
// diagnostic: one relaxed load of one aligned word, exempt from
// ThreadSanitizer.  See Note [A thread dump is a snapshot].
template <class T>
[[gnu::noinline, gnu::no_sanitize("thread")]] T snap(const T& field) noexcept {
  T v;
  __atomic_load(&field, &v, __ATOMIC_RELAXED);
  return v;
}

// what_name names what a waiter waits in (detail::waiter::what_t), as
// dumps and errors say it: "mutex lock", "chan read", ...; `op` (its
// detail::waiter::kind_t) tells a shared_mutex's shared waiter apart.
const char* what_name(std::uint8_t what, std::uint8_t op = 0) noexcept;

// dump_all_threads writes the listing of every live green thread, headed by
// `why`, to f.  Any OS thread while the Runtime exists (a green thread, the
// IO manager's thread on SIGQUIT, the ticker); takes every all_lock in turn.
void dump_all_threads(std::FILE* f, const char* why);

// blocked_threads_report lists the blocked threads, one line each, at most
// `max_lines` of them (then "... and N more"): the deadlock report that
// blocked_indefinitely carries.  Same callers as dump_all_threads.
std::string blocked_threads_report(unsigned max_lines);

// thread_name is "thread 12" or "thread 12 \"label\""; the caller holds
// t's home all_lock (labels are written under it).
std::string thread_name(const Thread* t);

// waits_on describes what blocked thread t waits on ("mvar take 0x...",
// "fd 7 to be readable", "sleep, due in 12 ms"), from a racy snapshot of
// its fields; "" if it is not blocked.  `now` is now_ns().
std::string waits_on(const Thread* t, std::int64_t now);

}  // namespace capstan::rts
