// unmapper.hpp - giving a finished run's stack slabs back to the OS without
// holding up run()'s return.  See Note [Unmapping after the run] in
// storage/unmapper.cpp.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace capstan::rts::unmapper {

using Mappings = std::vector<std::pair<void*, std::size_t>>;

// kBackgroundSlabs: from this many slabs on, unmap hands them to a thread
// of its own; fewer are unmapped at once by the caller.
inline constexpr std::size_t kBackgroundSlabs = 16;

// unmap gives every mapping in maps back to the OS: at once, or on the
// unmapping thread (kBackgroundSlabs); the caller no longer touches them.
void unmap(Mappings maps) noexcept;

// wait returns once every mapping handed to unmap has been unmapped.
void wait() noexcept;

}  // namespace capstan::rts::unmapper
