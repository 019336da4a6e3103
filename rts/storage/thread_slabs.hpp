// thread_slabs.hpp - where Thread objects come from and go back to: slabs.
//
// Threads are carved from slabs of kSlab and recycled, never freed one by
// one: a fork/finish cycle costs two pointer swaps, not a malloc and a free
// (which, with a million short threads, also meant page faults as glibc
// trimmed and regrew its heap).  Each capability keeps a private free list
// [owner]; a thread that finishes on another capability than the one that
// made it lands in the finisher's list, so lists beyond 2*kBatch spill a
// batch to the shared depot, and an empty list refills from it before
// carving a new slab.  Memory is bounded by the peak number of live
// threads, as in GHC, and released when run() returns.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "thread/thread.hpp"

namespace capstan::rts {

class ThreadDepot {
 public:
  static constexpr std::size_t kSlab = 64;
  static constexpr std::size_t kBatch = 256;

  // take_batch returns a chain (linked through link) of up to kBatch fresh
  // or recycled threads and its length in *n.
  Thread* take_batch(std::size_t* n);
  // give_batch accepts a chain of exactly n threads.
  void give_batch(Thread* chain, std::size_t n);
  // release_all destroys every slab; no Thread may be in use.
  void release_all();

 private:
  std::mutex mu_;
  std::vector<std::pair<Thread*, std::size_t>> batches_;  // guarded by mu_
  std::vector<Thread*> slabs_;                            // guarded by mu_
};

class ThreadCache {
 public:
  explicit ThreadCache(ThreadDepot* depot = nullptr) : depot_(depot) {}
  void attach(ThreadDepot* depot) { depot_ = depot; }

  Thread* get() {
    if (!head_) head_ = depot_->take_batch(&n_);
    Thread* t = head_;
    head_ = t->link;
    --n_;
    t->link = nullptr;
    return t;
  }
  void put(Thread* t) {
    t->link = head_;
    head_ = t;
    if (++n_ > 2 * ThreadDepot::kBatch) spill();
  }

 private:
  void spill();
  ThreadDepot* depot_;
  Thread* head_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace capstan::rts
