// fd_waits.cpp - the IO manager's fd registrations: one uv_poll_t per fd
// being waited on, its waiters, close_fd and io_interrupt_fd, on the IO
// thread.
//
// Note [fd registrations]
// ~~~~~~~~~~~~~~~~~~~~~~~
// libuv allows one uv_poll_t per fd, so every fd being waited on has one
// FdEntry holding the handle and two waiter lists (readable, writable); the
// handle's event mask is the union of what the waiters want, updated as
// they come and go.  uv_poll is level-triggered: a woken waiter is removed
// at once, so the fd is not reported again until someone waits again.  When
// the last waiter leaves, the handle is closed, unless the fd is `sticky`:
// fds owned by capstan::net, which are always closed through close_fd, keep
// their (stopped) handle and skip uv_poll_init's fcntl and epoll probes on
// the next wait.  A user fd is never kept: after a plain close(2) its number
// may come back as a regular file, which epoll rejects (libuv aborts when a
// registration it believes valid fails).  close_fd runs on the IO thread:
// finish every waiter with `closed`, stop and close the handle, close(2),
// and only then wake them (Note [Wake last]) - in that order, so no waiter
// can be woken by a later fd reusing the number, and epoll never holds a
// closed fd.  (A lingering socket's close(2) runs on a closing thread
// after the polling has stopped, and a close_fd caller waits for it there:
// Note [Closing a lingering socket] in io/closer.hpp.)  uv_poll_init also makes the fd non-blocking (documented in
// docs/io.md).  Regular files cannot be polled (EPERM) and never block: a
// wait on one returns at once.
//
// Note [A plain close under a wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A program that close(2)s a user fd while green threads wait on it,
// instead of calling close_fd, leaves an entry whose handle libuv believes
// registered while epoll has forgotten the file.  libuv aborts the process
// when a registration change on it then fails: a second wait wanting the
// other direction, or one of two waiters leaving, changes the mask, and
// epoll_ctl answers EBADF (the number is free), ENOENT (reused by another
// file) or EPERM (reused by a regular file).  And a wait on the reused
// number that needs no change would join the dead entry and never be
// woken.  So each user entry remembers its file (st_dev, st_ino, from one
// fstat when it is made), and before a new waiter joins it, and before its
// mask changes, the IO thread checks that the number still names that
// file.  If not, the entry is stale: its waiters get kInterrupted (io_error
// "fd N was closed while this thread waited on it"), its handle is closed,
// and the new wait starts afresh - on the new file, or failing with EBADF
// if the number is free.  net's fds (sticky) are closed only through
// close_fd and skip the check, which costs an fstat - unless a user's
// wait joins one: a plain close(2) of a connection's fd (misuse) and a
// wait on the reused number used to join the stopped handle and make
// libuv abort when epoll refused the new file.
// Every anonymous-inode file (eventfd, timerfd, signalfd, epoll) has the
// same st_dev and st_ino, so for those the check cannot tell the old file
// from a new one reusing the number: a stranded waiter may be woken by
// the new file, and a wait on the number needing no mask change joins
// the dead entry and waits for its time-out, or, untimed, until shutdown.
// Rejected: holding a duplicate of each such fd and comparing the two with
// kcmp(KCMP_FILE).  The duplicate keeps the closed file registered in
// epoll (its waiter is then woken "ready" on a number that names another
// file), takes one of the program's fds (its last one, under
// RLIMIT_NOFILE), can itself be closed by a stale close_fd, and kcmp
// names a process (a child forked after a run compares against its
// parent).
// What is left: this, a close racing with the IO thread between the check
// and libuv's epoll_ctl (microseconds, in the same loop iteration), and
// waiters alone on a closed fd, which nothing changes, wait for their
// time-out or shutdown.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "io/io_thread.hpp"

namespace capstan::rts::iomgr {

void IoManager::start_wait(Request* r) {
  if (!interrupted_.empty() && interrupted_.count(r->fd)) {  // Note [Interrupted fds]
    finish(r, kInterrupted, true);
    return;
  }
  auto it = fds_.try_emplace(r->fd, nullptr).first;
  // Note [A plain close under a wait]: a user's wait checks any entry,
  // net's only its own kind's.
  if (it->second && (!r->sticky || !it->second->sticky) && !still_same_file(it->second)) {
    drop_stale(it->second);  // forgets it
    it = fds_.try_emplace(r->fd, nullptr).first;
  }
  FdEntry*& slot = it->second;
  if (!slot) {
    auto* e = new FdEntry;
    int rc = uv_poll_init(&loop_, &e->handle, r->fd);
    struct stat st {};
    if (rc == 0) {  // remember the file: Note [A plain close under a wait]
      if (::fstat(r->fd, &st) == 0) {
        e->file_known = true;
        e->dev = st.st_dev;
        e->ino = st.st_ino;
      } else if (!r->sticky) {  // closed since uv_poll_init's probes (net's fds stay open)
        rc = -errno;  // libuv's error codes are negated errnos on Unix
        e->handle.data = e;
        uv_close(reinterpret_cast<uv_handle_t*>(&e->handle), &IoManager::on_poll_closed);
        e = nullptr;  // freed by the close callback
      }
    }
    if (rc != 0) {
      if (e) delete e;
      fds_.erase(r->fd);
      if (rc == UV_EPERM) {  // a regular file: epoll refuses it, it never blocks
        finish(r, kReady, true);
      } else {
        r->err = rc;
        finish(r, kFailed, true);
      }
      return;
    }
    e->fd = r->fd;
    e->handle.data = e;
    slot = e;
  }
  FdEntry* e = slot;
  e->sticky = e->sticky || r->sticky;
  Request*& head = r->writable ? e->writers : e->readers;
  r->prev = nullptr;
  r->next = head;
  if (head) head->prev = r;
  head = r;
  r->entry = e;
  update_poll(e);
}

// update_poll sets e's mask to what its waiters want; with none, stops the
// handle (sticky) or closes it.
void IoManager::update_poll(FdEntry* e) {
  int want = (e->readers ? UV_READABLE : 0) | (e->writers ? UV_WRITABLE : 0);
  if (want == 0) {
    if (e->sticky) {
      if (e->events) uv_poll_stop(&e->handle);
      e->events = 0;
    } else {
      close_entry(e);
    }
    return;
  }
  if (want == e->events) return;
  if (e->events != 0 && !e->sticky && !still_same_file(e)) {  // Note [A plain close under a wait]
    drop_stale(e);
    return;
  }
  int rc = uv_poll_start(&e->handle, want, &IoManager::on_poll);
  if (rc != 0) {
    for (Request** list : {&e->readers, &e->writers}) {
      while (Request* r = *list) {
        r->err = rc;
        finish(r, kFailed, true);
      }
    }
    close_entry(e);
    return;
  }
  e->events = want;
}

// still_same_file: does e's fd still name the file it was made for
// (Note [A plain close under a wait])?
bool IoManager::still_same_file(const FdEntry* e) const {
  if (!e->file_known) return true;
  struct stat st {};
  return ::fstat(e->fd, &st) == 0 && st.st_dev == e->dev && st.st_ino == e->ino;
}

// drop_stale ends every wait on a closed fd's entry with kInterrupted and
// closes its handle (Note [A plain close under a wait]).
void IoManager::drop_stale(FdEntry* e) {
  for (Request** list : {&e->readers, &e->writers})
    while (Request* w = *list) finish(w, kInterrupted, true);
  if (e->events) uv_poll_stop(&e->handle);
  e->events = 0;
  close_entry(e);
}

// close_entry forgets e and closes its handle (freed in the close callback).
void IoManager::close_entry(FdEntry* e) {
  fds_.erase(e->fd);
  uv_close(reinterpret_cast<uv_handle_t*>(&e->handle), &IoManager::on_poll_closed);
}

void IoManager::on_poll(uv_poll_t* p, int status, int events) {
  auto* self = static_cast<IoManager*>(p->loop->data);
  auto* e = static_cast<FdEntry*>(p->data);
  // An error (status < 0) wakes everyone: their read/write reports it.
  bool rd = status < 0 || (events & (UV_READABLE | UV_DISCONNECT)) != 0;
  bool wr = status < 0 || (events & UV_WRITABLE) != 0;
  if (rd)
    while (Request* r = e->readers) self->finish(r, kReady, true);
  if (wr)
    while (Request* r = e->writers) self->finish(r, kReady, true);
  self->update_poll(e);  // before the wake-ups: Note [Wake last]
  self->flush_wakes();
}

void IoManager::do_close(Request* r) {
  auto it = fds_.find(r->fd);
  if (it != fds_.end()) {  // wake, stop, close: Note [fd registrations]
    FdEntry* e = it->second;
    for (Request** list : {&e->readers, &e->writers})
      while (Request* w = *list) finish(w, kClosed, true);
    if (e->events) uv_poll_stop(&e->handle);
    e->events = 0;
    close_entry(e);
  }
  interrupted_.erase(r->fd);  // the number may be reused from here on
  if (Closer::may_linger(r->fd)) {  // Note [Closing a lingering socket] in io/closer.hpp
    Request* waiter = r->kind == Op::close_fd ? r : nullptr;
    if (waiter) {
      // The closer's reference.  relaxed: we hold one, so this only counts.
      waiter->refs.fetch_add(1, std::memory_order_relaxed);
      parked_.fetch_add(1, std::memory_order_seq_cst);  // until its close is done
    }
    if (closer_.close_later(r->fd, waiter)) {
      finish(r, kReady, /*wake=*/false);  // the closer wakes the waiter
      return;
    }
    if (waiter) {  // no closing thread: close here
      parked_.fetch_sub(1, std::memory_order_seq_cst);
      waiter->release();
    }
  }
  int rc = ::close(r->fd);
  r->err = rc == 0 ? 0 : errno;
  finish(r, kReady, r->kind == Op::close_fd);
}

// Note [Interrupted fds]
// ~~~~~~~~~~~~~~~~~~~~~~
// capstan::net closes a socket that other green threads are using in two
// steps (Note [Closing under a blocked call] in lib/net.cpp): the fd stays
// open while any call uses it, and the closer sends io_interrupt_fd, which
// wakes every waiter on it with kInterrupted and fails every later wait on
// it the same way, until the fd is closed through do_close (which the last
// call out sends).  The closer counts itself as a call until its interrupt
// is pushed, so the close is always pushed after the interrupt and the
// queue delivers them in that order (drain keeps arrival order): an
// interrupt never arrives for a number already closed and maybe reused.
// As the fd is open until the close, its number cannot be reused by
// another file meanwhile, so the set never refers to the wrong file.  A
// wait and the interrupt can arrive in either order: before, the interrupt
// finds the waiter; after, the waiter finds the number in the set.
void IoManager::do_interrupt(Request* r) {
  interrupted_.insert(r->fd);
  auto it = fds_.find(r->fd);
  if (it != fds_.end()) {
    FdEntry* e = it->second;
    for (Request** list : {&e->readers, &e->writers})
      while (Request* w = *list) finish(w, kInterrupted, true);
    update_poll(e);  // no waiters: stopped (sticky) or closed
  }
  finish(r, kReady, false);
}

// drop_fds closes every poll handle at shutdown, finishing the waiters
// without a wake-up.
void IoManager::drop_fds() {
  std::vector<FdEntry*> entries;
  for (auto& [fd, e] : fds_) entries.push_back(e);
  for (FdEntry* e : entries) {
    for (Request** list : {&e->readers, &e->writers})
      while (Request* w = *list) finish(w, kClosed, false);
    if (fds_.count(e->fd)) close_entry(e);  // sticky ones are still here
  }
  interrupted_.clear();
}

}  // namespace capstan::rts::iomgr
