// owned_fds.cpp - the table of fds owned by capstan::net sockets: see
// Note [Owned fds] in io/owned_fds.hpp.
#include "io/owned_fds.hpp"

#include <new>

namespace capstan::rts {

std::atomic<std::uint64_t>* OwnedFds::word(int fd, bool make) noexcept {
  if (fd < 0 || fd >= kMaxTracked) return nullptr;
  std::atomic<Chunk*>& slot = chunks_[fd >> kChunkBits];
  Chunk* c = slot.load(std::memory_order_acquire);  // acquire: its zeroed words
  if (!c) {
    if (!make) return nullptr;
    Chunk* fresh = new (std::nothrow) Chunk;
    if (!fresh) return nullptr;
    // release: publishes the zeroed words; acquire on failure: the winner's.
    if (slot.compare_exchange_strong(c, fresh, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
      c = fresh;
    else
      delete fresh;
  }
  return &c->words[(fd & ((1 << kChunkBits) - 1)) / 64];
}

OwnedFds& owned_fds() noexcept {
  static constinit OwnedFds table;  // constant-initialised: usable before main
  return table;
}

}  // namespace capstan::rts
