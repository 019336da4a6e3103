// say.hpp - writing the runtime's diagnostics to stderr without ever
// failing.
//
// Note [Diagnostics never fail]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The runtime writes to stderr in the middle of a run: the accept
// back-off's report, the hog warning (on the ticker's thread), the IO
// manager's internal errors (on the IO thread).  fmt::print(stderr, ...)
// throws when the write fails, so with stderr on a full disk or a pipe
// whose reader has gone, a warning became an exception: out of
// listener::accept (the loop the back-off protects died of it), or
// std::terminate on the runtime's own threads.  And a write to a pipe
// whose reader has gone raises SIGPIPE, which kills a process that has not
// ignored it - a server that never writes to stderr otherwise would die of
// the runtime's remark.  So say() formats into memory, writes with
// write(2), ignores every error, and blocks SIGPIPE in the calling thread
// around the write; a SIGPIPE the write raised is consumed (sigtimedwait
// with a zero time-out) unless one was pending before.  sigpending cannot
// tell a thread's pending signals from the process's: if a SIGPIPE sent
// to the whole process happens to be pending as we start, ours is left
// pending too, and delivered when the mask is restored.  A diagnostic that
// cannot be written is lost; nothing else changes.  The one-line reports
// go through say: the accept back-off's, the hog warning, an uncaught
// exception in a thread, the stack arena's, shutdown's, the IO manager's
// internal errors, +RTS -l's.  The thread dump and the +RTS -s summary,
// written to a FILE (stderr or the caller's), do not.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace capstan::rts {

// say_text writes `text` to stderr (fd 2); never fails, never raises
// SIGPIPE.  Any thread.
void say_text(std::string_view text) noexcept;

// say formats as fmt::format and writes the result as say_text; a
// formatting failure (out of memory) loses the message.
template <class... A>
void say(fmt::format_string<A...> f, A&&... args) noexcept {
  try {
    say_text(fmt::format(f, std::forward<A>(args)...));
  } catch (...) {
  }
}

}  // namespace capstan::rts
