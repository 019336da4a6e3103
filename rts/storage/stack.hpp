// stack.hpp - green-thread stacks: reserved slabs, guards, per-capability pools.
//
// Design (see docs/stacks.md for the numbers):
//  * Stacks are carved out of large slabs, one mmap per slab of kSlabStacks
//    stacks, mapped MAP_NORESERVE: reserving costs address space only, and a
//    page costs memory only once a thread touches it.  One million stacks
//    need a few thousand mappings, not two million.
//  * Each stack has one guard page below it.  Preferred: MADV_GUARD_INSTALL
//    (Linux >= 6.13), which marks page-table entries and does not split the
//    slab's mapping, so every stack is guarded for free.  Fallback:
//    mprotect(PROT_NONE), which splits the mapping into two VMAs per stack,
//    so it is used only for the first kMaxMprotectGuards stacks (well under
//    vm.max_map_count = 65530); stacks beyond that rely on the software
//    check (the saved stack pointer is compared with the stack's low end at
//    every switch) and the count is reported in +RTS -s.
//    Rejected: one mmap per stack (1M mappings: impossible), growing or
//    segmented stacks (C++ frames cannot move: pointers into them are everywhere).
//  * Free stacks are pooled per capability (LIFO, so the hottest stack is
//    reused and its pages are already resident).  Beyond the watermark
//    (+RTS -kw) the pool returns batches to the arena with MADV_DONTNEED,
//    which gives their memory back to the OS but keeps the reservation and
//    the guard for the next user.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "primitives/runtime_work.hpp"

namespace capstan::rts {

class StackArena {
 public:
  enum class GuardMode { madvise_guard, mprotect, none };

  // configure sets the usable size of every stack; call before allocate().
  void configure(std::size_t usable_size);
  // prime maps the first slab and sets reserve_for(caps) of its stacks
  // aside; throws std::system_error if it cannot (run() then fails before
  // anything ran).
  void prime(unsigned caps);
  // release_all unmaps every slab; no stack may be in use.
  void release_all();

  // allocate returns the low end of a usable stack of size(), or null if
  // no memory can be mapped for one (Note [Running out of stacks]).
  void* allocate();
  // allocate_batch adds up to n stacks to out (fewer lock round trips);
  // fewer, or none, if no memory can be mapped for more.
  void allocate_batch(std::vector<void*>& out, std::size_t n);
  // take_reserve hands out one of the stacks prime() set aside, or null if
  // all are in use; return_reserve puts one back.  Note [Running out of
  // stacks].
  void* take_reserve();
  void return_reserve(void* s);
  // warn_once prints, the first time in a run after a slab could not be
  // mapped, what that means; call it from a stack with room (a reserve one).
  void warn_once();
  // Two per capability - a thread ending unstarted still holds its
  // reserve stack while its capability prepares the next one, which may
  // need one too - and eight for threads that run whole on one.
  static constexpr std::size_t reserve_for(unsigned caps) { return 2 * std::size_t{caps} + 8; }
  // give_back returns stacks whose memory is to be released to the OS.
  void give_back(void* const* stacks, std::size_t n);
  // park_warm returns stacks that keep their memory, for any capability to
  // reuse; beyond kWarmMax the oldest are released.  Note [Trimming when idle].
  void park_warm(void* const* stacks, std::size_t n);
  // release_warm gives the memory of every warm stack back to the OS.
  void release_warm();
  // keep_memory stops releasing stacks' memory one at a time until
  // release_all (shutdown: the slabs are about to be unmapped whole).
  // Note [Keeping stacks at shutdown] in stack.cpp.
  void keep_memory();
  static constexpr std::size_t kWarmMax = 4096;

  std::size_t size() const { return usable_; }
  // start_size is the part of the stack at lo that a thread starts in:
  // size() less the stack's colour, 0 to kColours - 1 cache lines left
  // unused at its top (Note [Stack colouring] in stack.cpp).
  std::size_t start_size(const void* lo) const {
    // Fibonacci hashing of the page number: neighbouring stacks get
    // unrelated colours.  The top 4 bits: kColours is 16.  (gdb's
    // _start_top in gdb/capstan_gdb.py computes the same.)
    auto h = (std::uint64_t{reinterpret_cast<std::uintptr_t>(lo)} >> 12) * 0x9E3779B97F4A7C15u;
    return usable_ - (h >> 60) * kColourBytes;
  }
  static constexpr std::size_t kColourBytes = 64;  // one cache line
  static constexpr std::size_t kColours = 16;      // up to 960 bytes: see the Note
  GuardMode guard_mode() const { return guard_mode_; }
  std::uint64_t mappings() const { return mappings_; }
  std::uint64_t guarded() const { return guarded_; }
  std::uint64_t reserved_stacks() const { return carved_; }
  // exhausted: the last slab mapping failed within kExhaustedNs of `now`
  // and no stack has come back to the arena since (a hint, read without
  // the lock; after kExhaustedNs the next first run tries again anyway).
  static constexpr std::int64_t kExhaustedNs = 10'000'000;
  bool maybe_exhausted() const { return exhausted_at_.load(std::memory_order_relaxed) != 0; }
  bool exhausted(std::int64_t now) const {
    std::int64_t at = exhausted_at_.load(std::memory_order_relaxed);
    return at != 0 && now - at < kExhaustedNs;
  }
  // map_failures counts the slabs that could not be mapped.
  std::uint64_t map_failures() const { return map_failures_.load(std::memory_order_relaxed); }
  // is_guard_page tells whether addr lies in the guard page below stack_lo.
  bool is_guard_page(const void* addr, const void* stack_lo) const;

  static constexpr std::size_t kSlabStacks = 256;
  static constexpr std::size_t kMaxMprotectGuards = 16384;

 private:
  void* carve_locked();
  bool new_slab_locked();
  std::size_t install_guards_at_once(char* slab);  // guards installed, from the first
  void release_all_locked();
  // clear_exhausted_locked ends the exhaustion hint (mu_ held), writing the
  // word only if it is set: every StackPool::put reads it, and a store of
  // the same 0 would still take the cache line from those readers.
  void clear_exhausted_locked() {
    if (exhausted_at_.load(std::memory_order_relaxed) != 0)
      exhausted_at_.store(0, std::memory_order_relaxed);
  }

  std::mutex mu_;
  std::size_t usable_ = 0;     // bytes usable per stack (multiple of the page size)
  std::size_t stride_ = 0;     // usable_ + one guard page
  std::size_t page_ = 4096;
  GuardMode guard_mode_ = GuardMode::none;  // decided on the first slab
  bool guard_mode_known_ = false;
  char* slab_next_ = nullptr;  // next stride to carve (guarded by mu_)
  std::size_t slab_left_ = 0;
  std::vector<std::pair<void*, std::size_t>> slabs_;  // guarded by mu_
  std::vector<void*> cold_;    // released stacks ready for reuse (guarded by mu_)
  std::vector<void*> warm_;    // pooled stacks still resident, oldest first (guarded by mu_)
  bool keep_memory_ = false;   // set by keep_memory, cleared by release_all (guarded by mu_)
  std::vector<void*> reserve_; // set aside by prime() (guarded by mu_)
  std::uint64_t mappings_ = 0, guarded_ = 0, carved_ = 0;
  std::atomic<std::uint64_t> map_failures_{0};  // written under mu_, read by map_failures() without it
  std::atomic<std::int64_t> exhausted_at_{0};   // when a mapping last failed, 0 since a stack came back (written under mu_, read as a hint)
  bool warned_ = false;        // the out-of-memory line was printed (guarded by mu_)
  bool no_process_madvise_ = false;  // process_madvise refused once this run (guarded by mu_)
  int last_error_ = 0;         // errno of the last failed slab mapping (guarded by mu_)
  // install_guards_at_once's vector (guarded by mu_): here rather than on
  // the stack, which may be a 16 KiB green stack in the middle of a switch.
  iovec guard_iov_[kSlabStacks];
};

// StackPool: one capability's free stacks.  Owner: the capability's Task.
class StackPool {
 public:
  // attach: `runtime_work` is the capability's Capability::runtime_loop,
  // set while the pool waits for the arena (its lock, mmap, madvise): the
  // runtime's own work, not the program's (Note [Warning about a hog] in
  // schedule/hog_warning.cpp).
  void attach(StackArena* arena, std::size_t watermark, std::atomic<bool>* runtime_work = nullptr) {
    arena_ = arena;
    watermark_ = watermark;
    runtime_work_ = runtime_work;
  }
  // get returns a free stack, or null if none can be had (Note [Running
  // out of stacks] in stack.cpp).
  void* get() {
    if (free_.empty()) [[unlikely]] {
      RuntimeWork m(runtime_work_);
      arena_->allocate_batch(free_, 16);
      if (free_.empty()) return nullptr;
    }
    void* s = free_.back();
    free_.pop_back();
    return s;
  }
  // See Note [Trimming when idle] in stack.cpp.
  static constexpr std::size_t kBusyFactor = 8;
  // While the arena is out of memory, every stack a pool holds goes to the
  // arena, where any capability can take it (Note [Running out of stacks]
  // in stack.cpp: sharing pools).
  void put(void* s) {
    free_.push_back(s);
    if (arena_->maybe_exhausted()) [[unlikely]] share_all();
    else if (free_.size() > kBusyFactor * watermark_ + 16) [[unlikely]] trim(true);
  }
  // trim_idle moves the stacks beyond the watermark to the arena's warm
  // list (released when the whole runtime is idle); called when the
  // capability has nothing to run.  Out of memory, it moves them all.
  void trim_idle() {
    if (arena_->maybe_exhausted()) [[unlikely]] share_all();
    else if (free_.size() > watermark_) trim(true);
  }
  std::size_t pooled() const { return free_.size(); }

 private:
  void trim(bool busy);
  void share_all();
  StackArena* arena_ = nullptr;
  std::size_t watermark_ = 0;
  std::atomic<bool>* runtime_work_ = nullptr;  // [owner writes; the ticker reads]
  std::vector<void*> free_;
};

}  // namespace capstan::rts
