// unmapper_test.cpp - giving stack slabs back after a run (Note [Unmapping
// after the run] in rts/storage/unmapper.cpp): small releases at once,
// large ones on the unmapping thread, every mapping gone once wait()
// returns, a fork()ed child that does not wait for its parent's thread, and
// a run that starts only after the last run's stacks are back.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "capstan/capstan.hpp"
#include "capstan_test.hpp"
#include "storage/stack.hpp"
#include "storage/unmapper.hpp"

namespace {

namespace unmapper = capstan::rts::unmapper;

constexpr std::size_t kMapping = 256 * 1024;

// mapped: is [p, p + n) still mapped?  mincore fails with ENOMEM for an
// unmapped range.
bool mapped(void* p, std::size_t n) {
  std::vector<unsigned char> vec(n / static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  return mincore(p, n, vec.data()) == 0;
}

// still_ours: is p still the start of one of the test's mappings (mapped,
// and holding its pattern)?  The next run may map something of its own
// where a freed mapping was, a guard page even, so the kernel reads p on our
// behalf (into a pipe), which fails instead of faulting where p is not
// readable.
constexpr unsigned char kPattern = 0xA5;
bool still_ours(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return true;  // cannot tell: count it against us
  unsigned char got[8] = {};
  bool ours = write(fds[1], p, sizeof got) == static_cast<ssize_t>(sizeof got) &&
              read(fds[0], got, sizeof got) == static_cast<ssize_t>(sizeof got);
  close(fds[0]);
  close(fds[1]);
  for (unsigned char c : got) ours = ours && c == kPattern;
  return ours;
}

unmapper::Mappings make(std::size_t count) {
  unmapper::Mappings maps;
  for (std::size_t i = 0; i < count; ++i) {
    void* p = mmap(nullptr, kMapping, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    std::memset(p, 1, kMapping);  // touched: pages the kernel must free
    maps.emplace_back(p, kMapping);
  }
  return maps;
}

TEST(Unmapper, FewMappingsAreUnmappedBeforeUnmapReturns) {
  auto maps = make(unmapper::kBackgroundSlabs - 1);
  auto copy = maps;
  unmapper::unmap(std::move(maps));
  for (auto [p, n] : copy) EXPECT_FALSE(mapped(p, n)) << "a small release is not at once";
}

TEST(Unmapper, ManyMappingsAreAllUnmappedOnceWaitReturns) {
  for (int round = 0; round < 3; ++round) {  // one release at a time, back to back
    auto maps = make(unmapper::kBackgroundSlabs * 4);
    auto copy = maps;
    unmapper::unmap(std::move(maps));
    unmapper::wait();
    for (auto [p, n] : copy) EXPECT_FALSE(mapped(p, n)) << "round " << round;
  }
  unmapper::wait();  // nothing pending: returns at once
}

// The child of a fork() taken while the thread may still run has no such
// thread: its wait returns, and its copies of the mappings stay its own.
TEST(Unmapper, AForkedChildDoesNotWaitForItsParentsThread) {
  auto maps = make(unmapper::kBackgroundSlabs * 8);
  void* first = maps.front().first;
  unmapper::unmap(std::move(maps));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(10);  // a hang fails the test instead of holding it
    unmapper::wait();
    unmapper::wait();
    _exit(first != nullptr ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  unmapper::wait();
}

// threads_named counts this process's threads called `name`.
int threads_named(const std::string& name) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string s;
    if (std::getline(comm, s) && s == name) ++n;
  }
  return n;
}

// A run that ends with thousands of threads blocked hands its stacks to
// the unmapping thread, and run() returns; the next run starts only once
// every release is done: a release handed over just before it (256 MiB of
// touched pages, some tens of milliseconds of work) is complete when its
// main begins, and no capstan-unmap thread is left.
TEST(Unmapper, TheNextRunStartsAfterTheLastRunsStacksAreBack) {
  // Enough stacks for the unmapping thread (kBackgroundSlabs slabs), and
  // under ThreadSanitizer's limit of 8,128 threads and fibers.
  constexpr int kThreads =
      static_cast<int>(capstan::rts::StackArena::kSlabStacks * unmapper::kBackgroundSlabs) + 256;
  capstan::run(capstan_test::opts(1), [] {
    auto never = std::make_shared<capstan::mvar<int>>();
    for (int i = 0; i < kThreads; ++i) capstan::fork_io([never] { never->take(); });
    while (never->waiting() != static_cast<std::size_t>(kThreads)) capstan::yield();
  });
  EXPECT_EQ(capstan::statistics().threads_killed, static_cast<std::uint64_t>(kThreads));
  unmapper::Mappings big;
  constexpr std::size_t kBig = 4 << 20;
  for (int i = 0; i < 64; ++i) {
    void* p = mmap(nullptr, kBig, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p, kPattern, kBig);
    big.emplace_back(p, kBig);
  }
  auto copy = big;
  unmapper::unmap(std::move(big));
  int still_mapped = -1;
  capstan::run(capstan_test::opts(1), [&] {
    still_mapped = 0;
    for (auto [p, n] : copy) still_mapped += still_ours(p);
  });
  EXPECT_EQ(still_mapped, 0);
  EXPECT_EQ(threads_named("capstan-unmap"), 0);
}

}  // namespace
