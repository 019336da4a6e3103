// buffer.cpp - TraceBuffer's slow paths: a new chunk, the writer's side.
// See Note [Trace buffers] in trace/buffer.hpp.
#include "trace/buffer.hpp"

#include <new>

#include "primitives/clock.hpp"
#include "trace/trace.hpp"

namespace capstan::rts {

TraceBuffer::~TraceBuffer() {
  auto free_list = [](TraceChunk* c) {
    while (c) {
      TraceChunk* n = c->next;
      delete c;
      c = n;
    }
  };
  free_list(take_full());
  free_list(spare_);
  delete cur_;
}

TraceChunk* TraceBuffer::next_chunk() noexcept {
  if (TraceChunk* full = cur_) {
    // release: the writer's acquire exchange then sees the chunk's events.
    full->next = full_.load(std::memory_order_relaxed);
    while (!full_.compare_exchange_weak(full->next, full, std::memory_order_release,
                                        std::memory_order_relaxed)) {
    }
    cur_ = nullptr;
  }
  TraceChunk* c = nullptr;
  {
    std::lock_guard<std::mutex> g(spare_mu_);
    if ((c = spare_)) spare_ = c->next;
  }
  if (!c && chunks_ < kMaxChunks) {
    c = new (std::nothrow) TraceChunk;
    if (c) ++chunks_;
  }
  if (!c) {
    ++dropped;
    ++dropped_total;
    return nullptr;
  }
  c->n = 0;
  c->next = nullptr;
  cur_ = c;
  if (dropped != 0) {
    std::uint64_t n = dropped;
    dropped = 0;
    TraceEvent& e = c->ev[c->n++];
    e = TraceEvent{trace_now(), static_cast<std::uint32_t>(TraceKind::dropped), 0, n, 0};
  }
  return c;
}

TraceChunk* TraceBuffer::take_full() noexcept {
  // acquire: pairs with next_chunk's release push.
  TraceChunk* lifo = full_.exchange(nullptr, std::memory_order_acquire);
  TraceChunk* fifo = nullptr;
  while (lifo) {
    TraceChunk* n = lifo->next;
    lifo->next = fifo;
    fifo = lifo;
    lifo = n;
  }
  return fifo;
}

void TraceBuffer::give_back(TraceChunk* c) noexcept {
  std::lock_guard<std::mutex> g(spare_mu_);
  c->next = spare_;
  spare_ = c;
}

}  // namespace capstan::rts
