// options_test.cpp - +RTS parsing: accepted forms, argv rewriting, the
// CAPSTAN_RTS variable, and errors that name the flag and the accepted form.
#include <gtest/gtest.h>

#include <capstan/options.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Argv {
  std::vector<std::string> store;
  std::vector<char*> ptrs;
  int argc = 0;
  explicit Argv(std::vector<std::string> a) : store(std::move(a)) {
    for (auto& s : store) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
    argc = static_cast<int>(store.size());
  }
  char** argv() { return ptrs.data(); }
};

class Options : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("CAPSTAN_RTS"); }
  void TearDown() override { unsetenv("CAPSTAN_RTS"); }
};

TEST_F(Options, DefaultsAreGhcLike) {
  Argv a({"prog"});
  auto o = capstan::options::parse(a.argc, a.argv());
  EXPECT_EQ(o.capabilities, 1u);
  EXPECT_EQ(o.stack_size, 256u * 1024);
  EXPECT_EQ(o.timeslice, std::chrono::microseconds(20000));
  EXPECT_FALSE(o.stats);
}

TEST_F(Options, ConsumesRtsGroupsAndKeepsProgramArguments) {
  Argv a({"prog", "x", "+RTS", "-N2", "-K1m", "-C0.005", "-s", "-RTS", "y", "+RTS", "-kw7"});
  auto o = capstan::options::parse(a.argc, a.argv());
  EXPECT_EQ(o.capabilities, 2u);
  EXPECT_EQ(o.stack_size, 1024u * 1024);
  EXPECT_EQ(o.timeslice, std::chrono::microseconds(5000));
  EXPECT_TRUE(o.stats);
  EXPECT_EQ(o.stack_pool_watermark, 7u);
  ASSERT_EQ(a.argc, 3);
  EXPECT_STREQ(a.argv()[1], "x");
  EXPECT_STREQ(a.argv()[2], "y");
  EXPECT_EQ(a.argv()[3], nullptr);
}

TEST_F(Options, DiagnosticFlags) {
  Argv a({"prog", "+RTS", "-l", "--dump-on-sigquit", "--warn-hog=250", "-RTS"});
  auto o = capstan::options::parse(a.argc, a.argv());
  EXPECT_TRUE(o.trace);
  EXPECT_EQ(o.trace_file, "");  // the default name, <program>.trace.json
  EXPECT_TRUE(o.dump_on_sigquit);
  EXPECT_EQ(o.warn_hog, std::chrono::milliseconds(250));
  Argv b({"prog", "+RTS", "-lrun.json", "--warn-hog=0", "-RTS"});
  auto p = capstan::options::parse(b.argc, b.argv());
  EXPECT_TRUE(p.trace);
  EXPECT_EQ(p.trace_file, "run.json");
  EXPECT_FALSE(p.dump_on_sigquit);
  EXPECT_EQ(p.warn_hog, std::chrono::milliseconds(0));
  capstan::options d;
  EXPECT_FALSE(d.trace);
  EXPECT_EQ(d.warn_hog, std::chrono::milliseconds(100));
}

TEST_F(Options, DashDashRtsEndsFlagProcessing) {
  Argv a({"prog", "--RTS", "+RTS", "-N2"});
  auto o = capstan::options::parse(a.argc, a.argv());
  EXPECT_EQ(o.capabilities, 1u);
  ASSERT_EQ(a.argc, 3);
  EXPECT_STREQ(a.argv()[1], "+RTS");
}

TEST_F(Options, NAloneMeansAllCores) {
  Argv a({"prog", "+RTS", "-N", "-RTS"});
  auto o = capstan::options::parse(a.argc, a.argv());
  EXPECT_GE(o.capabilities, 1u);
}

TEST_F(Options, EnvironmentComesFirstCommandLineWins) {
  setenv("CAPSTAN_RTS", "-N3 -K64k", 1);
  Argv a({"prog", "+RTS", "-N2", "-RTS"});
  auto o = capstan::options::parse(a.argc, a.argv());
  EXPECT_EQ(o.capabilities, 2u);
  EXPECT_EQ(o.stack_size, 64u * 1024);
}

void expect_error(std::vector<std::string> args, const std::string& flag, const std::string& accepted) {
  Argv a(std::move(args));
  try {
    capstan::options::parse(a.argc, a.argv());
    FAIL() << "no error for " << flag;
  } catch (const capstan::options_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'" + flag + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(accepted), std::string::npos) << msg;
  }
}

TEST_F(Options, MalformedFlagsNameTheFlagAndTheAcceptedForm) {
  expect_error({"p", "+RTS", "-N0"}, "-N0", "1 <= n <= 256");
  expect_error({"p", "+RTS", "-N999"}, "-N999", "1 <= n <= 256");
  expect_error({"p", "+RTS", "-Nx"}, "-Nx", "-N<n>");
  expect_error({"p", "+RTS", "-N-2"}, "-N-2", "-N<n>");
  expect_error({"p", "+RTS", "-K"}, "-K", "-K<size>");
  expect_error({"p", "+RTS", "-K1q"}, "-K1q", "-K<size>");
  expect_error({"p", "+RTS", "-K1k"}, "-K1k", "between 16k and 1g");
  expect_error({"p", "+RTS", "-K5g"}, "-K5g", "between 16k and 1g");
  expect_error({"p", "+RTS", "-C"}, "-C", "-C<secs>");
  expect_error({"p", "+RTS", "-C-1"}, "-C-1", "-C<secs>");
  expect_error({"p", "+RTS", "-Cabc"}, "-Cabc", "-C<secs>");
  expect_error({"p", "+RTS", "-sfile"}, "-sfile", "-s");
  expect_error({"p", "+RTS", "-Z"}, "-Z", "accepted: -N[<n>], -K<size>, -C<secs>, -s");
  expect_error({"p", "+RTS", "--warn-hog"}, "--warn-hog", "--warn-hog=<ms>");
  expect_error({"p", "+RTS", "--warn-hog=x"}, "--warn-hog=x", "--warn-hog=<ms>");
  expect_error({"p", "+RTS", "--warn-hog=-5"}, "--warn-hog=-5", "0 <= ms <= 3600000");
  expect_error({"p", "+RTS", "--dump-on-sigquit=1"}, "--dump-on-sigquit=1", "--dump-on-sigquit");
  expect_error({"p", "+RTS", "N2"}, "N2", "start with '-'");
  expect_error({"p", "+RTS", "-"}, "-", "a lone '-' names no flag");
  // Only plain decimal numbers: no sign, space or other base.
  expect_error({"p", "+RTS", "-N 2"}, "-N 2", "-N<n>");
  expect_error({"p", "+RTS", "-N+2"}, "-N+2", "-N<n>");
  expect_error({"p", "+RTS", "-C0x10"}, "-C0x10", "-C<secs>");
  expect_error({"p", "+RTS", "-C 1"}, "-C 1", "-C<secs>");
  expect_error({"p", "+RTS", "-K0x100k"}, "-K0x100k", "-K<size>");
  expect_error({"p", "+RTS", "-kw 5"}, "-kw 5", "-kw<n>");
  expect_error({"p", "+RTS", "--spare-tasks= 2"}, "--spare-tasks= 2", "--spare-tasks=<n>");
  expect_error({"p", "-RTS"}, "-RTS", "without a preceding +RTS");
}

TEST_F(Options, BadEnvironmentFlagsSayWhereTheyCameFrom) {
  setenv("CAPSTAN_RTS", "-N2 -Q", 1);
  Argv a({"prog"});
  try {
    capstan::options::parse(a.argc, a.argv());
    FAIL();
  } catch (const capstan::options_error& e) {
    EXPECT_NE(std::string(e.what()).find("in CAPSTAN_RTS"), std::string::npos) << e.what();
  }
}

// parse_flags called directly names no source: the flags are the
// caller's, not CAPSTAN_RTS's nor the command line's.
TEST_F(Options, ParseFlagsCalledDirectlyNamesNoSource) {
  capstan::options o;
  try {
    o.parse_flags("-N2 -Q");
    FAIL();
  } catch (const capstan::options_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("bad RTS flag '-Q': unknown flag; accepted: -N[<n>]"), std::string::npos) << what;
    EXPECT_EQ(what.find("CAPSTAN_RTS"), std::string::npos) << what;
    EXPECT_EQ(what.find("command line"), std::string::npos) << what;
  }
}

// A flag with a NUL byte in it is refused, not read up to the NUL ("-N2\0junk"
// was taken for -N2).
TEST_F(Options, AFlagWithANulByteIsRefused) {
  for (std::string flag : {std::string("-N2\0junk", 8), std::string("-s\0x", 4),
                           std::string("-K64k\0zz", 8)}) {
    capstan::options o;
    try {
      o.parse_flags(flag);
      FAIL() << "accepted a flag with a NUL byte";
    } catch (const capstan::options_error& e) {
      EXPECT_NE(std::string(e.what()).find("may not contain a NUL byte"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(o.capabilities, capstan::options{}.capabilities);
  }
}

// A program started the idiomatic way (run(argc, argv, main), as
// examples/hello is) and given a bad +RTS flag prints the message and the
// flag summary and exits 1, as a GHC program does - no std::terminate.
struct Outcome {
  int status;  // exit status, or -1 if killed by a signal
  std::string output;  // stdout and stderr
};
Outcome run_hello(const std::string& args) {
  const char* hello = std::getenv("CAPSTAN_HELLO");
  std::string cmd = std::string("'") + hello + "' " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-2, "popen failed"};
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST_F(Options, AProgramGivenABadFlagPrintsItAndTheSummaryAndExits1) {
  if (!std::getenv("CAPSTAN_HELLO")) GTEST_SKIP() << "CAPSTAN_HELLO (examples/hello) not set";
  Outcome r = run_hello("+RTS -Nx -RTS");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("'-Nx'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected -N (all cores) or -N<n>"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("capstan RTS flags"), std::string::npos) << "no flag summary: " << r.output;
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

TEST_F(Options, AProgramGivenRtsHelpPrintsTheSummaryAndExits1) {
  if (!std::getenv("CAPSTAN_HELLO")) GTEST_SKIP() << "CAPSTAN_HELLO (examples/hello) not set";
  for (const char* flag : {"-?", "--help"}) {
    Outcome r = run_hello(std::string("+RTS '") + flag + "' -RTS");
    EXPECT_EQ(r.status, 1) << flag << ": " << r.output;
    EXPECT_NE(r.output.find("  -N[<n>]"), std::string::npos) << flag << ": " << r.output;
  }
}

TEST_F(Options, AProgramGivenGoodFlagsRuns) {
  if (!std::getenv("CAPSTAN_HELLO")) GTEST_SKIP() << "CAPSTAN_HELLO (examples/hello) not set";
  Outcome r = run_hello("+RTS -N2 -RTS");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("of 2"), std::string::npos) << r.output;
}

}  // namespace
