// raise_killed.hpp - throwing thread_killed from the runtime.
#pragma once

namespace capstan::rts {

// raise_killed throws thread_killed; in a green thread it skips the
// search phase of the throw (Note [Raising thread_killed in one walk] in
// schedule/raise_killed.cpp), elsewhere it is `throw thread_killed{}`.
[[noreturn, gnu::cold]] void raise_killed();

}  // namespace capstan::rts
