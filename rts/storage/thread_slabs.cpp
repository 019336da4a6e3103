// thread_slabs.cpp - see thread_slabs.hpp.
#include "storage/thread_slabs.hpp"

namespace capstan::rts {

Thread* ThreadDepot::take_batch(std::size_t* n) {
  std::lock_guard<std::mutex> g(mu_);
  if (!batches_.empty()) {
    auto [chain, len] = batches_.back();
    batches_.pop_back();
    *n = len;
    return chain;
  }
  Thread* slab = new Thread[kSlab];
  slabs_.push_back(slab);
  for (std::size_t i = 0; i + 1 < kSlab; ++i) slab[i].link = &slab[i + 1];
  slab[kSlab - 1].link = nullptr;
  *n = kSlab;
  return slab;
}

void ThreadDepot::give_batch(Thread* chain, std::size_t n) {
  std::lock_guard<std::mutex> g(mu_);
  batches_.emplace_back(chain, n);
}

void ThreadDepot::release_all() {
  std::lock_guard<std::mutex> g(mu_);
  for (Thread* s : slabs_) delete[] s;
  slabs_.clear();
  batches_.clear();
}

void ThreadCache::spill() {
  Thread* chain = head_;
  Thread* last = head_;
  for (std::size_t i = 1; i < ThreadDepot::kBatch; ++i) last = last->link;
  head_ = last->link;
  last->link = nullptr;
  n_ -= ThreadDepot::kBatch;
  depot_->give_batch(chain, ThreadDepot::kBatch);
}

}  // namespace capstan::rts
