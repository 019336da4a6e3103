// stack.cpp - see stack.hpp for the design.
#include "storage/stack.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "primitives/clock.hpp"
#include "primitives/fault_injection.hpp"
#include "primitives/say.hpp"
#include "storage/unmapper.hpp"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace capstan::rts {

namespace {

// Note [Verifying the guard probe]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// madvise(MADV_GUARD_INSTALL) returning 0 is not proof of a guard: qemu-user
// (7.2, as Debian 12 ships it; see docs/stacks.md) treats every madvise it
// does not know as a hint and returns 0 without calling the kernel, so the
// AArch64 tests under qemu ran with no guard pages at all and an overflow
// would have written over the stack below.  So the first guard is checked
// once: the kernel reading the page on our behalf (write() from it into a
// pipe) must fail with EFAULT, as it does for a real guard region.  Any other
// outcome - the write succeeds, no pipe can be made - falls back to
// mprotect, whose guards qemu does emulate.  Reading the page directly would
// be the other check, but a real guard answers that with SIGSEGV.
bool kernel_cannot_read(const void* page) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  bool refused = write(fds[1], page, 1) < 0 && errno == EFAULT;
  close(fds[0]);
  close(fds[1]);
  return refused;
}

}  // namespace

// Note [Stack colouring]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Every stack starts a page boundary above the last one's guard, so
// without help every thread's first frames - the context a switch saves
// and restores, the frames of the loop that blocks - sit at the same
// offset within a page, and the same few lines of each stack are the hot
// ones.  A cache picks a line's set by the address bits just above the
// line offset: bits 6-11 in the L1, a few more in the L2, and the 65-page
// stride varies those few over a handful of values only.  So a program
// switching among many threads (ring: 503 threads passing a token) kept
// its hot lines in a few dozen of the L2's sets and missed to the L3 on
// each hop.  (No layout makes 503 threads' lines fit in the L1.)  Each
// stack therefore has a colour: its thread starts that many cache lines
// below the top (start_size), 0 to 15 lines picked by a hash of the
// stack's address, so that the hot lines of different stacks fall in
// sixteen times as many sets, as a memory allocator colours its slabs.
// Measured, A/B at -N1, medians of 7: `ring` 55.9 -> 34.7 ns per hop,
// `threads003` 29.8 -> 17.9, `pingpong` (two threads) unchanged,
// `threads001` 59.3 -> 60.1 (the hash, on each new thread's first run;
// docs/stacks.md).  Sixteen colours, not a page's sixty-four: with
// colours up to 4032 bytes a thread's first frames crossed into a second
// page of its stack about half the time, and every fresh stack paid a
// second page fault - `threads007` and `shutdown` (20,000 and 100,000
// parked threads) 29 % and 30 % slower, `killblocked` 19 % - for no more
// gain on `ring`.  With at most 960 bytes (a 16th of the smallest stack,
// 16 KiB) they were level.  The colour is a property of the stack, not the
// thread: a stack reused from the pool keeps it, so its resident lines
// stay where they were.  Rejected: a random colour per thread (the same
// spread, but a reused stack's warm lines would move), and strides that
// are not a whole number of pages (guard pages and MADV_DONTNEED work in
// pages).
void StackArena::configure(std::size_t usable_size) {
  page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  usable_ = (usable_size + page_ - 1) / page_ * page_;
  stride_ = usable_ + page_;
}

// Note [Running out of stacks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A thread gets its stack when it first runs, not when it is forked (a
// fork is 50-70 ns and most threads never need their stack at the same
// time as the others: Note [Fork back-pressure]).  So the mmap of a new
// slab failing - the address space or memory used up, an RLIMIT_AS, a
// cgroup limit - is met in the middle of a switch, where nothing can be
// thrown to anyone.  The runtime used to abort there.  Now:
//  * run() maps the first slab before anything runs (prime) and sets
//    reserve_for(-N) of its stacks aside - two per capability, since a
//    thread ending unstarted holds its reserve stack until its capability
//    has switched to the next thread, which may need one too, and eight
//    more for threads that run whole on one; if even that fails, run() throws
//    std::system_error naming the stack size, and nothing has started.
//  * A thread whose first run finds no stack, and no memory for a new
//    slab, is given a reserve stack and ends at once without running its
//    body: counted as died and as `unstarted` (statistics, +RTS -s), its
//    state_of is `died`, its closure is destroyed as for a thread
//    shutdown reclaims before it ran (an async reports thread_killed, a
//    spark thread hands its spark back), and one line on stderr says what
//    happened the first time in a run.  The reserve stack then goes back
//    to the reserve: the reserve is only held while a closure's destructor
//    runs.  Threads the runtime must run - main, bound threads (fork_os,
//    in-calls), whose Tasks wait for them - run their whole body on the
//    reserve stack instead.
//  * Each later first run tries the arena again, so once threads finish
//    (their stacks come back) or memory is freed, new threads run as
//    before: the program degrades - some threads fail to start - and
//    recovers.
//  * Spark threads are the runtime's own idea: while the arena is
//    exhausted (a mapping failed in the last 10 ms and no stack has come
//    back since) an idle capability whose pool holds no stack, and that
//    holds no stolen sparks, does not start one (try_sparks,
//    schedule/idle.cpp).  It would only end unstarted and give the sparks
//    it stole back, round after round; they wait in their pools for their
//    makers instead.  After 10 ms it tries again, so spark parallelism
//    comes back with the memory even in a program that forks nothing.
//  * Only when the reserve itself is all in use (more than eight threads
//    that must run, or whose closures' destructors block, all without a
//    stack at once) does the runtime stop, with a message: there is no
//    stack left to run anything on.
//  * Each capability's pool is its own (owner-only): a capability whose
//    pool is empty asks the arena, and sees its warm and released stacks,
//    not the other capabilities' pools (up to the watermark, 256 by
//    default, while idle; kBusyFactor x that plus 16 while busy).  So while
//    the arena is exhausted (the hint above), a pool keeps nothing: the
//    next stack returned to it - a thread finishing there - and an idle
//    pass of its capability send all it holds to the arena's warm list
//    (StackPool::share_all), where any capability's next allocation finds
//    them.  Returning stacks clears the hint, so pools go back to keeping
//    theirs until a mapping fails again.  A capability that finishes no
//    thread and never idles keeps its pool: exhaustion can still be met
//    a little early, never late.
// Tested by tests/rts/storage/stack_exhaustion_test.cpp, with the
// fail_stack_maps fault knob standing in for the kernel's ENOMEM.
// Note [Installing a slab's guards at once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A slab's 256 guard pages are 256 ranges, a stride apart, and madvise
// takes one range a call: 0.9-1.1 us a guard here, a system call and a
// page-table walk each.  process_madvise takes a vector of ranges of our
// own process (any advice, for the caller itself, since Linux 6.13): one
// call per slab, 0.54 us a guard measured on this machine (256 guards in
// 137-147 us against 227-275 us, with and without another of our threads
// running).  It is tried first; whatever it did not do - a kernel without
// it (ENOSYS, EINVAL), or a partial result - falls back to madvise per
// stack, from the first guard it did not install.  A program that holds
// many threads at once carves a stack for each: `delay 100000` carves
// 5,000-11,000 in a run.
std::size_t StackArena::install_guards_at_once(char* slab) {
#if defined(SYS_pidfd_open) && defined(SYS_process_madvise)
  if (no_process_madvise_) return 0;
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  if (pidfd < 0) {
    no_process_madvise_ = true;  // refused (old kernel, seccomp): not asked again this run
    return 0;
  }
  for (std::size_t i = 0; i < kSlabStacks; ++i) guard_iov_[i] = {slab + i * stride_, page_};
  long done =
      ::syscall(SYS_process_madvise, pidfd, guard_iov_, kSlabStacks, MADV_GUARD_INSTALL, 0);
  ::close(pidfd);
  if (done <= 0) {
    no_process_madvise_ = true;
    return 0;
  }
  // Ranges are advised in order; a short count stops inside or after one.
  return std::min(kSlabStacks, static_cast<std::size_t>(done) / page_);
#else
  (void)slab;
  return 0;
#endif
}

bool StackArena::new_slab_locked() {
  std::size_t bytes = stride_ * kSlabStacks;
  void* p = MAP_FAILED;
  int e = ENOMEM;  // what an injected failure stands for
  if (!fault_injection::fail_stack_maps.load(std::memory_order_relaxed)) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    e = errno;
  }
  if (p == MAP_FAILED) {
    last_error_ = e;
    exhausted_at_.store(std::max<std::int64_t>(now_ns(), 1), std::memory_order_relaxed);
    map_failures_.store(map_failures_.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
    return false;  // reported by warn_once(), off this stack
  }
  clear_exhausted_locked();
  slabs_.emplace_back(p, bytes);
  ++mappings_;
  slab_next_ = static_cast<char*>(p);
  slab_left_ = kSlabStacks;
  if (!guard_mode_known_) {
    // Probe once: does this kernel have lightweight guard regions?  See
    // Note [Verifying the guard probe].
    guard_mode_known_ = true;
    guard_mode_ = madvise(p, page_, MADV_GUARD_INSTALL) == 0 && kernel_cannot_read(p)
                      ? GuardMode::madvise_guard
                      : GuardMode::mprotect;
  }
  if (guard_mode_ == GuardMode::madvise_guard) {
    // See Note [Installing a slab's guards at once].
    std::size_t i = install_guards_at_once(slab_next_);
    guarded_ += i;
    for (; i < kSlabStacks; ++i) {
      if (madvise(slab_next_ + i * stride_, page_, MADV_GUARD_INSTALL) != 0) break;
      ++guarded_;
    }
  }
  return true;
}

void* StackArena::carve_locked() {
  if (!warm_.empty()) {  // resident: no page faults for the next user
    void* s = warm_.back();
    warm_.pop_back();
    return s;
  }
  if (!cold_.empty()) {
    void* s = cold_.back();
    cold_.pop_back();
    return s;
  }
  if (slab_left_ == 0 && !new_slab_locked()) return nullptr;
  char* base = slab_next_;
  slab_next_ += stride_;
  --slab_left_;
  ++carved_;
  if (guard_mode_ == GuardMode::mprotect) {
    if (guarded_ < kMaxMprotectGuards && mprotect(base, page_, PROT_NONE) == 0) ++guarded_;
  }
  return base + page_;  // the guard page sits below the usable range
}

void* StackArena::allocate() {
  std::lock_guard<std::mutex> g(mu_);
  return carve_locked();
}

void StackArena::allocate_batch(std::vector<void*>& out, std::size_t n) {
  std::lock_guard<std::mutex> g(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    void* s = carve_locked();
    if (!s) return;  // Note [Running out of stacks]
    out.push_back(s);
  }
}

void StackArena::prime(unsigned caps) {
  std::lock_guard<std::mutex> g(mu_);
  const std::size_t want = reserve_for(caps);
  reserve_.reserve(want);
  while (reserve_.size() < want) {
    void* s = carve_locked();
    if (!s) {
      // No ~Runtime will run: unmap what was mapped (a reserve over one
      // slab, from -N125 up, may fail on its second).
      release_all_locked();
      throw std::system_error(
          last_error_, std::generic_category(),
          fmt::format("capstan::run: cannot map {} bytes for the first green-thread stacks "
                      "(+RTS -K is {} bytes a stack)",
                      stride_ * kSlabStacks, usable_));
    }
    reserve_.push_back(s);
  }
}

// warn_once prints, once a run, why threads are ending unstarted.  Called
// by a thread on a reserve stack (fork.cpp's thread_entry), never from
// new_slab_locked: that runs in the middle of a switch, on the stack of the
// thread switching away, which may be a 16 KiB green stack, and glibc's
// fprintf to unbuffered stderr puts an 8 KiB buffer on the stack.
void StackArena::warn_once() {
  std::size_t bytes, usable;
  int e;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (warned_ || map_failures_.load(std::memory_order_relaxed) == 0) return;
    warned_ = true;
    bytes = stride_ * kSlabStacks;
    usable = usable_;
    e = last_error_;
  }
  say("capstan: cannot map {} bytes for green-thread stacks: {}; threads that find "
      "no free stack end before they run (counted 'unstarted' by +RTS -s) until "
      "stacks or memory are freed (lower +RTS -K, now {} bytes, or the number of "
      "threads alive at once)\n",
      bytes, std::strerror(e), usable);
}

void* StackArena::take_reserve() {
  std::lock_guard<std::mutex> g(mu_);
  if (reserve_.empty()) return nullptr;
  void* s = reserve_.back();
  reserve_.pop_back();
  return s;
}

void StackArena::return_reserve(void* s) {
  std::lock_guard<std::mutex> g(mu_);
  reserve_.push_back(s);
}

// Note [Releasing stacks in runs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Each madvise(MADV_DONTNEED) is a system call, a page-table walk and a TLB
// flush (a shoot-down IPI to every other core running this process).  When
// many threads end together - 100,000 blocked threads killed, say - their
// stacks come back in batches, and one call per stack was about 40 % of a
// kill (perf over `killblocked 100000 5 -N1`: __madvise 13 % of all samples,
// the kill phase a third of the run).  Stacks carved from one slab are
// neighbours, stride_ apart, and threads made together end together, so a
// batch sorted by address is mostly runs of neighbours.  One madvise covers
// a run, guard pages between its stacks included: MADV_DONTNEED keeps a
// MADV_GUARD_INSTALL marker (the kernel drops PTE markers only when asked
// to; checked by StackArena.ReleasingARunKeepsTheGuardsBetween in
// tests/rts/storage/stack_test.cpp), an mprotect'ed guard has no pages to
// drop, and an unguarded one was never touched.
void StackArena::give_back(void* const* stacks, std::size_t n) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (keep_memory_) {  // Note [Keeping stacks at shutdown]
      warm_.insert(warm_.end(), stacks, stacks + n);
      clear_exhausted_locked();
      return;
    }
  }
  // Release the memory outside the lock: madvise is a system call.  See
  // Note [Releasing stacks in runs].
  std::vector<char*> sorted(n);
  for (std::size_t i = 0; i < n; ++i) sorted[i] = static_cast<char*>(stacks[i]);
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (j < n && sorted[j] == sorted[j - 1] + stride_) ++j;
    madvise(sorted[i], static_cast<std::size_t>(sorted[j - 1] - sorted[i]) + usable_, MADV_DONTNEED);
    i = j;
  }
  std::lock_guard<std::mutex> g(mu_);
  cold_.insert(cold_.end(), stacks, stacks + n);
  clear_exhausted_locked();
}

void StackArena::park_warm(void* const* stacks, std::size_t n) {
  std::vector<void*> old;
  {
    std::lock_guard<std::mutex> g(mu_);
    warm_.insert(warm_.end(), stacks, stacks + n);
    clear_exhausted_locked();
    if (warm_.size() > kWarmMax && !keep_memory_) {  // Note [Keeping stacks at shutdown]
      auto excess = static_cast<std::ptrdiff_t>(warm_.size() - kWarmMax);
      old.assign(warm_.begin(), warm_.begin() + excess);
      warm_.erase(warm_.begin(), warm_.begin() + excess);
    }
  }
  if (!old.empty()) give_back(old.data(), old.size());
}

void StackArena::release_warm() {
  std::vector<void*> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (warm_.empty() || keep_memory_) return;
    all.swap(warm_);
  }
  give_back(all.data(), all.size());
}

// Note [Keeping stacks at shutdown]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At shutdown every thread finishes within moments, and release_all then
// unmaps the slabs whole.  Releasing each finished thread's stack on the
// way (MADV_DONTNEED beyond kWarmMax) would cost a system call and a TLB
// shoot-down IPI per stack: measured with perf on 100,000 threads blocked
// at exit, madvise and its shoot-downs took about 40% of the samples and
// shutdown took 7-10 us per thread against a 1.3 us throw + catch.  So
// shutdown calls keep_memory first, and from then on stacks stay resident
// (on the warm list, where the last threads' next allocation may reuse
// them) until release_all.  No memory is kept that was not already in use:
// every such stack was resident when its thread was blocked.
void StackArena::keep_memory() {
  std::lock_guard<std::mutex> g(mu_);
  keep_memory_ = true;
}

void StackArena::release_all() {
  std::lock_guard<std::mutex> g(mu_);
  release_all_locked();
}

void StackArena::release_all_locked() {
  keep_memory_ = false;
  unmapper::unmap(std::move(slabs_));  // Note [Unmapping after the run] in storage/unmapper.cpp
  slabs_.clear();
  cold_.clear();
  warm_.clear();
  reserve_.clear();
  warned_ = false;
  no_process_madvise_ = false;
  clear_exhausted_locked();
  map_failures_.store(0, std::memory_order_relaxed);
  slab_next_ = nullptr;
  slab_left_ = 0;
  mappings_ = guarded_ = carved_ = 0;
  guard_mode_known_ = false;
}

bool StackArena::is_guard_page(const void* addr, const void* stack_lo) const {
  auto a = reinterpret_cast<std::uintptr_t>(addr);
  auto lo = reinterpret_cast<std::uintptr_t>(stack_lo);
  return a < lo && a >= lo - page_;
}

// Note [Trimming when idle]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// Giving a stack's memory back (MADV_DONTNEED) costs a system call and, with
// several capabilities, a TLB shoot-down IPI to every core running this
// process: 18% of `delay` at -N2 when the pool trimmed to the watermark as
// soon as it passed twice it.  So a busy capability lets its pool grow to
// kBusyFactor x the watermark, and then parks the excess in the arena's
// warm list - still resident - where any capability's next allocation takes
// it first (at -N2 one capability often finishes the threads the other
// forks, so stacks flow one way).  Only beyond StackArena::kWarmMax stacks
// is memory released while busy.  When a capability falls idle (idle(),
// before it sleeps) its pool goes back to the watermark, into the warm
// list; the ticker releases the warm list once every capability has been
// idle for two ticks, just before it parks (a capability that merely
// pauses between bursts must not pay a shoot-down per stack).  Memory kept
// beyond the watermark is bounded (kBusyFactor x watermark per capability
// plus kWarmMax), and returned within a few ticks of the runtime going idle.
void StackPool::share_all() {
  if (free_.empty()) return;  // parking nothing would clear the hint
  RuntimeWork m(runtime_work_);
  arena_->park_warm(free_.data(), free_.size());
  free_.clear();
}

void StackPool::trim(bool busy) {
  // Keep the watermark's worth of the most recently used (top of the LIFO),
  // give the coldest back to the OS in one batch.
  std::size_t excess = free_.size() - watermark_;
  RuntimeWork m(runtime_work_);
  if (busy) arena_->park_warm(free_.data(), excess);
  else arena_->give_back(free_.data(), excess);
  free_.erase(free_.begin(), free_.begin() + static_cast<std::ptrdiff_t>(excess));
}


}  // namespace capstan::rts
