// say.cpp - see Note [Diagnostics never fail] in primitives/say.hpp.
#include "primitives/say.hpp"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

namespace capstan::rts {

void say_text(std::string_view text) noexcept {
  const int saved_errno = errno;  // a diagnostic must not change the caller's errno
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  bool masked = pthread_sigmask(SIG_BLOCK, &pipe_only, &old) == 0;
  sigset_t pending;
  bool was_pending = false;
  if (masked && sigpending(&pending) == 0) was_pending = sigismember(&pending, SIGPIPE) == 1;
  bool broke = false;
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n > 0) {
      p += n;
      left -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      broke = n < 0 && errno == EPIPE;
      break;  // lost: see the Note
    }
  }
  if (masked) {
    if (broke && !was_pending) {  // consume the SIGPIPE this write raised
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  errno = saved_errno;
}

}  // namespace capstan::rts
