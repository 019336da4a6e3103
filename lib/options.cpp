// options.cpp - parsing +RTS ... -RTS flags (GHC's syntax, our subset).
#include "capstan/options.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

namespace capstan {

namespace {

constexpr unsigned kMaxCapabilities = 256;
constexpr std::size_t kMinStack = 16 * 1024;
constexpr std::size_t kMaxStack = std::size_t{1} << 30;

[[noreturn]] void bad(const std::string& flag, const std::string& where, const std::string& accepted) {
  throw options_error(fmt::format("capstan: bad RTS flag '{}'{}: {}", flag, where, accepted));
}

// plain_number: s starts with a decimal digit (or '.') and is not in
// another base (no 0x, no binary exponent): strtod and strtoul alone would
// take " 2", "+2" and "0x10".  A decimal exponent (1e-2) is fine.
bool plain_number(const char* s) {
  if (!(std::isdigit(static_cast<unsigned char>(*s)) || *s == '.')) return false;
  for (const char* p = s; *p; ++p)
    if (*p == 'x' || *p == 'X' || *p == 'p' || *p == 'P') return false;
  return true;
}

// Parses "<number>[k|K|m|M|g|G]" into bytes; false if malformed.
bool parse_size(const char* s, std::size_t& out) {
  if (!plain_number(s)) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno || end == s || !(v >= 0) || std::isinf(v)) return false;
  double mult = 1;
  switch (*end) {
    case 'k': case 'K': mult = 1024.0; ++end; break;
    case 'm': case 'M': mult = 1024.0 * 1024; ++end; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; ++end; break;
    default: break;
  }
  if (*end) return false;
  double bytes = v * mult;
  if (bytes > 1e18) return false;
  out = static_cast<std::size_t>(bytes);
  return true;
}

bool parse_uint(const char* s, unsigned long& out) {
  if (!std::isdigit(static_cast<unsigned char>(*s))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoul(s, &end, 10);
  return !errno && *end == '\0';
}

constexpr const char* kAccepted =
    "-N[<n>], -K<size>, -C<secs>, -s, -e<n>, -kw<n>, -l[<file>], --spare-tasks=<n>, "
    "--deadlock-detection=off|on|force, --dump-on-sigquit, --warn-hog=<ms>";

void apply_flag(options& o, const std::string& flag, const std::string& where) {
  const char* f = flag.c_str();
  // The C-string parsing below would stop at a NUL and take "-N2\0junk"
  // for -N2.
  if (std::size_t nul = flag.find('\0'); nul != std::string::npos)
    bad(flag.substr(0, nul) + "\\0...", where,
        std::string("a flag may not contain a NUL byte; accepted: ") + kAccepted);
  if (f[0] != '-')
    bad(flag, where, std::string("RTS flags start with '-'; accepted: ") + kAccepted);
  if (f[1] == '\0')
    bad(flag, where, std::string("a lone '-' names no flag; accepted: ") + kAccepted);
  if (flag == "-?" || flag == "--help")  // not a bad flag: parse_or_exit prints the summary
    throw options_error(fmt::format("capstan: RTS flag summary, as '{}'{} asked", flag, where));
  const char* arg = f + 2;
  if (flag.rfind("--spare-tasks", 0) == 0) {
    unsigned long n = 0;
    if (flag.size() < 15 || flag[13] != '=' || !parse_uint(f + 14, n) || n > 1024)
      bad(flag, where, "expected --spare-tasks=<n>, spare OS threads kept per capability, 0 <= n <= 1024");
    o.max_spare_tasks = static_cast<unsigned>(n);
    return;
  }
  if (flag == "--dump-on-sigquit") {
    o.dump_on_sigquit = true;
    return;
  }
  if (flag.rfind("--warn-hog", 0) == 0) {
    unsigned long ms = 0;
    if (flag.size() < 12 || flag[10] != '=' || !parse_uint(f + 11, ms) || ms > 3'600'000)
      bad(flag, where, "expected --warn-hog=<ms>, how long a thread may hold a capability without "
                       "a safe point while others wait before it is named on stderr, "
                       "0 <= ms <= 3600000 (0 = never)");
    o.warn_hog = std::chrono::milliseconds(ms);
    return;
  }
  if (flag.rfind("--deadlock-detection", 0) == 0) {
    std::string v = flag.size() > 21 && flag[20] == '=' ? flag.substr(21) : "";
    if (v == "off") o.deadlock_detection = options::deadlock::off;
    else if (v == "on") o.deadlock_detection = options::deadlock::on;
    else if (v == "force") o.deadlock_detection = options::deadlock::force;
    else
      bad(flag, where, "expected --deadlock-detection=off, =on (the default: stands down while "
                       "OS threads the runtime did not make exist) or =force");
    return;
  }
  switch (f[1]) {
    case 'N': {
      if (!*arg) {
        unsigned hw = std::thread::hardware_concurrency();
        o.capabilities = hw ? (hw > kMaxCapabilities ? kMaxCapabilities : hw) : 1;
        return;
      }
      unsigned long n = 0;
      if (!parse_uint(arg, n) || n < 1 || n > kMaxCapabilities)
        bad(flag, where, "expected -N (all cores) or -N<n> with 1 <= n <= 256");
      o.capabilities = static_cast<unsigned>(n);
      return;
    }
    case 'K': {
      std::size_t bytes = 0;
      if (!parse_size(arg, bytes) || bytes < kMinStack || bytes > kMaxStack)
        bad(flag, where,
            "expected -K<size>, a stack size in bytes with an optional k, m or g suffix, "
            "between 16k and 1g (e.g. -K256k)");
      o.stack_size = bytes;
      return;
    }
    case 'C': {
      char* end = nullptr;
      errno = 0;
      double secs = plain_number(arg) ? std::strtod(arg, &end) : -1;
      if (!plain_number(arg) || errno || *end || !(secs >= 0) || secs > 3600)
        bad(flag, where,
            "expected -C<secs>, the timeslice in seconds between 0 and 3600 (e.g. -C0.02; "
            "-C0 switches at every safe point)");
      o.timeslice = std::chrono::microseconds(static_cast<long long>(std::llround(secs * 1e6)));
      return;
    }
    case 's':
      if (*arg) bad(flag, where, "expected -s (print statistics at exit), with nothing after it");
      o.stats = true;
      return;
    case 'l':
      // -l alone: <program>.trace.json in the working directory.
      o.trace = true;
      o.trace_file = arg;
      return;
    case 'e': {
      unsigned long n = 0;
      if (!parse_uint(arg, n) || n < 1 || n > (1ul << 24))
        bad(flag, where, "expected -e<n>, sparks per capability pool, 1 <= n <= 16777216");
      o.spark_pool_size = n;
      return;
    }
    case 'k':
      if (arg[0] == 'w') {
        unsigned long n = 0;
        if (!parse_uint(arg + 1, n) || n > (1ul << 24))
          bad(flag, where, "expected -kw<n>, idle stacks kept per capability, 0 <= n <= 16777216");
        o.stack_pool_watermark = n;
        return;
      }
      break;
    default:
      break;
  }
  bad(flag, where, std::string("unknown flag; accepted: ") + kAccepted);
}

}  // namespace

const char* options::usage() {
  return "capstan RTS flags (+RTS ... -RTS, or the CAPSTAN_RTS environment variable):\n"
         "  -N[<n>]    number of capabilities (1..256); -N alone = all cores; default 1\n"
         "  -K<size>   stack reserved per green thread, e.g. -K256k, -K1m; default 256k\n"
         "  -C<secs>   timeslice, e.g. -C0.02 (default); -C0 = switch at every safe point\n"
         "  -s         print runtime statistics to stderr at exit\n"
         "  -e<n>      sparks per capability pool (default 4096)\n"
         "  -kw<n>     idle stacks kept warm per capability (default 256)\n"
         "  --spare-tasks=<n>  spare OS threads kept per capability for safe calls (default 6)\n"
         "  --deadlock-detection=off|on|force  raise blocked_indefinitely when every thread is\n"
         "             blocked for good (default on: not while outside OS threads exist)\n"
         "  -l[<file>] write an event trace (Chrome trace-event JSON, for Perfetto) to <file>;\n"
         "             -l alone: <program>.trace.json\n"
         "  --dump-on-sigquit  print every green thread to stderr on SIGQUIT (and go on)\n"
         "  --warn-hog=<ms>  name on stderr a thread that holds a capability this long without\n"
         "             a safe point while others wait (default 100; 0 = never)\n"
         "  -?         print this summary (also --help)\n";
}

namespace {
void apply_flags(options& o, const std::string& flags, const char* where) {
  std::istringstream in(flags);
  std::string flag;
  while (in >> flag) apply_flag(o, flag, where);
}
}  // namespace

void options::parse_flags(const std::string& flags) { apply_flags(*this, flags, ""); }

options options::parse(int& argc, char** argv) {
  options o;
  if (const char* env = std::getenv("CAPSTAN_RTS")) apply_flags(o, env, " in CAPSTAN_RTS");
  if (argc <= 0 || !argv) return o;
  std::vector<char*> keep;
  keep.push_back(argv[0]);
  bool in_rts = false;
  bool rest_is_program = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (rest_is_program) {
      keep.push_back(argv[i]);
    } else if (std::strcmp(a, "+RTS") == 0) {
      in_rts = true;
    } else if (std::strcmp(a, "-RTS") == 0) {
      if (!in_rts) bad(a, " on the command line", "-RTS without a preceding +RTS");
      in_rts = false;
    } else if (std::strcmp(a, "--RTS") == 0) {
      rest_is_program = true;  // GHC: everything after --RTS belongs to the program
      in_rts = false;
    } else if (in_rts) {
      apply_flag(o, a, " on the command line");
    } else {
      keep.push_back(argv[i]);
    }
  }
  for (std::size_t i = 0; i < keep.size(); ++i) argv[i] = keep[i];
  argc = static_cast<int>(keep.size());
  argv[argc] = nullptr;
  return o;
}

options options::parse_or_exit(int& argc, char** argv) {
  try {
    return parse(argc, argv);
  } catch (const options_error& e) {
    fmt::print(stderr, "{}\n{}", e.what(), usage());
    std::fflush(stderr);
    std::exit(1);
  }
}

}  // namespace capstan
