// options.hpp - runtime options and the +RTS ... -RTS parser.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "capstan/errors.hpp"

namespace capstan {

struct options {
  // Number of capabilities (virtual CPUs), +RTS -N<n>; -N alone = all cores.
  unsigned capabilities = 1;
  // Stack reserved for each green thread in bytes, +RTS -K<size>
  // (k/m/g suffixes).  Only touched pages cost memory.
  std::size_t stack_size = 256 * 1024;
  // Timeslice between context-switch requests, +RTS -C<secs>; 0 = switch at
  // every safe point.
  std::chrono::microseconds timeslice{20000};
  // Print the statistics summary at exit, +RTS -s.
  bool stats = false;
  // Idle stacks kept warm per capability before their memory is returned to
  // the OS, +RTS -kw<n>.
  std::size_t stack_pool_watermark = 256;
  // Sparks each capability's pool holds (rounded up to a power of two);
  // par() beyond that overflows: the spark is dropped and get() runs it
  // inline.  +RTS -e<n>, default 4096 as GHC.
  std::size_t spark_pool_size = 4096;
  // Spare Tasks (OS threads) kept per capability for safe calls; more exit
  // when they fall idle.  +RTS --spare-tasks=<n>, default 6 as GHC's
  // MAX_SPARE_WORKERS.
  unsigned max_spare_tasks = 6;
  // Deadlock detection, +RTS --deadlock-detection=off|on|force: when every
  // thread is blocked and nothing can wake one (no timer, fd wait, safe
  // call or in-call), each blocked thread gets blocked_indefinitely.  `on`
  // stands down while the process has OS threads the runtime did not make
  // (they could try_put into an mvar); `force` ignores them.
  enum class deadlock : unsigned char { off, on, force };
  deadlock deadlock_detection = deadlock::on;
  // Event trace, +RTS -l[<file>]: record which thread ran where and why it
  // stopped, wake-ups, sparks, safe calls, idle time, and write it as
  // Chrome trace-event JSON (Perfetto, chrome://tracing) when run() ends.
  // An empty trace_file means "<program>.trace.json".  See docs/trace.md.
  bool trace = false;
  std::string trace_file;
  // +RTS --dump-on-sigquit: SIGQUIT prints the thread dump (dump_threads)
  // to stderr and the program goes on, as a JVM's does.
  bool dump_on_sigquit = false;
  // +RTS --warn-hog=<ms>: a thread that holds a capability this long
  // without reaching a safe point while other threads wait is named once
  // on stderr, with the advice to call yield_point().  0 = never.
  std::chrono::milliseconds warn_hog{100};

  // parse returns the defaults updated first by the CAPSTAN_RTS environment
  // variable, then by every `+RTS ... -RTS` group in argv, which it removes
  // from argv (updating argc).  Throws options_error naming a bad flag.
  static options parse(int& argc, char** argv);

  // parse_or_exit is parse for a program's main(): on a bad flag it prints
  // the error and the flag summary (usage()) to stderr and exits with status
  // 1, as a GHC program does; `+RTS -?` (or --help) prints the summary and
  // exits 1 too.  run(argc, argv, main) calls it.
  static options parse_or_exit(int& argc, char** argv);

  // parse_flags applies space-separated RTS flags (without +RTS) to *this.
  void parse_flags(const std::string& flags);

  // usage lists the accepted flags, one per line.
  static const char* usage();
};

}  // namespace capstan
