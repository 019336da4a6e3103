// biased_locks.hpp - the runtime's side of an mvar lock biased to the one
// capability's holder: who the holder is, and a run's count of
// revocations.  See Note [Biased locks] in capstan/detail/mvar_core.hpp.
#pragma once

#include <cstdint>

namespace capstan::detail {

// start_bias_epoch resets the run's revocation count and lets owners make
// biased mvars again; called as a run starts, before any Task holds a
// capability.
void start_bias_epoch() noexcept;

// lock_revocations is how many biased mvars the run has revoked.
std::uint64_t lock_revocations() noexcept;

}  // namespace capstan::detail
