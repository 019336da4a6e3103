// bench.hpp - shared plumbing for nofib_like programs: argv, timing, the one
// result line, and memory readings.  Every program prints exactly one line:
//   capstan-bench name=<prog> impl=capstan caps=<N> n=<size> <metric>=<v> ... check=ok
#pragma once

#include <sys/resource.h>

#include <capstan/capstan.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace bench {

struct args {
  capstan::options opts;
  long long n;
  int argc = 0;           // what is left once +RTS ... -RTS is removed
  char** argv = nullptr;  // null-terminated, as main's

  // positive returns argument i (1 is the size) or `def` when it is absent,
  // exiting with status 2 unless it is a positive integer.  Reads the
  // arguments left after the RTS flags: main's argc still counts them.
  long long positive(int i, long long def, const char* what) const {
    if (i >= argc) return def;
    long long v = std::atoll(argv[i]);
    if (v <= 0) {
      std::fprintf(stderr, "%s must be a positive integer, got '%s'\n", what, argv[i]);
      std::exit(2);
    }
    return v;
  }
};

// parse consumes +RTS ... -RTS (as run(argc, argv, main) does) and reads the size (argv[1]) or the default.
inline args parse(int argc, char** argv, long long default_n) {
  args a{};
  a.opts = capstan::options::parse_or_exit(argc, argv);  // bad flag: message, summary, exit 1
  a.argc = argc;  // parse_or_exit took the RTS flags out of argc/argv
  a.argv = argv;
  a.n = argc > 1 ? std::atoll(argv[1]) : default_n;
  if (a.n <= 0) {
    std::fprintf(stderr, "size must be a positive integer, got '%s'\n", argv[1]);
    std::exit(2);
  }
  return a;
}

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Reads a "VmRSS:"-style field of /proc/self/status, in KiB.
inline long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string key;
  long value = 0;
  while (in >> key) {
    if (key == field) {
      in >> value;
      return value;
    }
    std::getline(in, key);
  }
  return -1;
}

// report prints the result line and returns the exit status.
inline int report(const char* name, unsigned caps, long long n, const std::string& metrics,
                  bool ok) {
  fmt::print("capstan-bench name={} impl=capstan caps={} n={} {} check={}\n", name, caps, n,
             metrics, ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace bench
