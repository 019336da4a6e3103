// run_queue.hpp - a capability's run queue: an intrusive deque of Threads.
//
// Owner: the Task running the capability; nobody else touches it (other
// capabilities send threads through the Inbox), so it needs no atomics.
// push_front, push_back and pop_front are all O(1).
#pragma once

#include <cstddef>

#include "thread/thread.hpp"

namespace capstan::rts {

class RunQueue {
 public:
  bool empty() const { return head_ == nullptr; }
  std::size_t size() const { return size_; }

  void push_back(Thread* t) {
    t->link = nullptr;
    if (tail_) tail_->link = t; else head_ = t;
    tail_ = t;
    ++size_;
  }
  void push_front(Thread* t) {
    t->link = head_;
    head_ = t;
    if (!tail_) tail_ = t;
    ++size_;
  }
  Thread* pop_front() {
    Thread* t = head_;
    if (!t) return nullptr;
    head_ = t->link;
    if (!head_) tail_ = nullptr;
    t->link = nullptr;
    --size_;
    return t;
  }
  Thread* front() const { return head_; }

 private:
  Thread* head_ = nullptr;
  Thread* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace capstan::rts
