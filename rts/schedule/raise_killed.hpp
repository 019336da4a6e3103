// raise_killed.hpp - throwing thread_killed from the runtime.
#pragma once

namespace capstan::rts {

// raise_killed throws thread_killed; in a green thread it skips the
// search phase of the throw (Note [Raising thread_killed in one walk] in
// schedule/raise_killed.cpp), elsewhere it is `throw thread_killed{}`.
[[noreturn, gnu::cold]] void raise_killed();
// raise_killed_tail is raise_killed declared as returning (a bool, so that
// callers returning void or bool alike can), so that a caller with nothing
// left to do can jump to it (a sibling call: GCC keeps the frame of a
// caller of a noreturn function) and its frame is not walked; it never
// returns.  Note [Raising thread_killed in one walk].
[[gnu::cold]] bool raise_killed_tail();

}  // namespace capstan::rts
