// raise_killed.hpp - throwing thread_killed from the runtime.
#pragma once

namespace capstan::rts {

// raise_killed throws thread_killed, first counting it as an asynchronous
// exception raised if `by_kill_thread`; in a green thread it skips the
// search phase of the throw (Note [Raising thread_killed in one walk] in
// schedule/raise_killed.cpp), elsewhere it is `throw thread_killed{}`.  It
// never returns; it is declared as returning (a bool, so that callers
// returning void or bool alike can) so that a caller with nothing left to
// do can jump to it and leave no frame of its own in the walk (GCC keeps
// the frame of any caller of a noreturn function).
[[gnu::cold]] bool raise_killed(bool by_kill_thread);

}  // namespace capstan::rts
