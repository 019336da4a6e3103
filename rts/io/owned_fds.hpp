// owned_fds.hpp - which fds a capstan::net socket or the IO manager's
// loop owns, so that close_fd can refuse them (it would close the fd under
// its owner, which closes it again later: by then the number may name
// another file).
//
// Note [Owned fds]
// ~~~~~~~~~~~~~~~~
// connection and listener close their fd themselves (Note [Closing under
// a blocked call] in lib/net.cpp).  A program that also calls
// capstan::close_fd(c.fd()) closes it twice: the second close(2) lands on
// whatever file the number names by then - another connection's socket on
// a busy server.  So the sockets mark their fds here from construction
// until their close is pushed, and close_fd throws usage_error for a
// marked fd, as does adopting a marked fd into a second connection (whose
// close would release the first owner's mark and close its fd).  The
// mark goes before the close is pushed, so a number is never reused while
// marked; the close itself may come later (a lingering close waits its
// turn on a closing thread), and a close_fd of the number in between is
// not refused.  The IO manager marks its loop's own fds (epoll fd, wake-up
// eventfd, signal pipe) while it runs, once its start can no longer fail,
// and unmarks them before the loop closes them: a close_fd of one - a
// stale number the runtime's start had taken - stopped the loop's polling
// and the IO thread died in libuv's abort(), with no message
// (IoManager.CloseFdOfTheLoopsOwnFdsIsRefused).  libuv's process-wide
// lock pipe, made once at the first loop's start, is not the loop's and
// is not marked.  The mark is one bit per fd in chunks of 65,536 made on first
// use and never freed (8 KiB each; fds at or above kMaxTracked, 16 M, are
// not tracked).  The check is best-effort, for misuse: a close_fd racing
// with the socket's own close may pass it, so the bits need no ordering
// beyond their own atomicity (relaxed), and a chunk pointer is published
// with release and read with acquire so its zeroed bits are seen.
#pragma once

#include <atomic>
#include <cstdint>

namespace capstan::rts {

class OwnedFds {
 public:
  static constexpr int kChunkBits = 16;
  static constexpr int kChunks = 256;
  static constexpr long kMaxTracked = long{kChunks} << kChunkBits;

  // claim marks fd as owned by a socket: false if it was already (a second
  // owner); true also when fd is not tracked.  Any thread.
  bool claim(int fd) noexcept {
    if (std::atomic<std::uint64_t>* w = word(fd, /*make=*/true))
      return !(w->fetch_or(bit(fd), std::memory_order_relaxed) & bit(fd));
    return true;
  }
  // release unmarks fd, before its owner pushes the close; any thread.
  void release(int fd) noexcept {
    if (std::atomic<std::uint64_t>* w = word(fd, /*make=*/false))
      w->fetch_and(~bit(fd), std::memory_order_relaxed);
  }
  // owned: is fd marked?  any thread.
  bool owned(int fd) const noexcept {
    const std::atomic<std::uint64_t>* w = const_cast<OwnedFds*>(this)->word(fd, false);
    return w && (w->load(std::memory_order_relaxed) & bit(fd));
  }

 private:
  static constexpr int kWords = (1 << kChunkBits) / 64;
  struct Chunk {
    std::atomic<std::uint64_t> words[kWords] = {};
  };
  static std::uint64_t bit(int fd) noexcept { return std::uint64_t{1} << (fd & 63); }
  // word holding fd's bit; makes its chunk if `make` (nullptr if fd is not
  // tracked, or its chunk does not exist and `make` is false, or memory ran
  // out: the check is then skipped, never the close).
  std::atomic<std::uint64_t>* word(int fd, bool make) noexcept;

  std::atomic<Chunk*> chunks_[kChunks] = {};  // made once, never freed
};

// The process's one table (fds are the process's).
OwnedFds& owned_fds() noexcept;

}  // namespace capstan::rts
