// thread_ids.hpp - the block of thread ids a capability (or an in-call
// Task) hands out.  See Note [Thread ids] in thread/threads.cpp.
//
// Ids come from the runtime's counter in blocks of kIdBlock, so that
// forking takes no shared write.  The owner hands them out with relaxed
// loads and stores (plain moves); others read `next` and `end` only to
// tell an id of a block its owner has not reached yet - an id no thread
// had - from an id whose thread has finished (check_thread_id).
#pragma once

#include <atomic>
#include <cstdint>

namespace capstan::rts {

// Thread ids are handed out to capabilities in blocks, so forking does not
// touch a shared counter.
inline constexpr std::uint64_t kIdBlock = 1024;

struct IdBlock {
  // The block is [end - kIdBlock, end); ids below `next` are handed out.
  // Both 0 until the first id.  [owner writes (relaxed); anyone reads]
  std::atomic<std::uint64_t> next{0};
  std::atomic<std::uint64_t> end{0};

  // unreached: whether `id` lies in this block and has not been handed
  // out.  From any thread; see check_thread_id for why a racy pair of
  // reads is good enough.
  bool unreached(std::uint64_t id) const noexcept {
    std::uint64_t e = end.load(std::memory_order_relaxed);
    std::uint64_t n = next.load(std::memory_order_relaxed);
    return e != 0 && id < e && id + kIdBlock >= e && id >= n;
  }
};

}  // namespace capstan::rts
