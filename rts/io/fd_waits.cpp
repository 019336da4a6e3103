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
// closed fd.  uv_poll_init also makes the fd non-blocking (documented in
// docs/io.md).  Regular files cannot be polled (EPERM) and never block: a
// wait on one returns at once.
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
  FdEntry*& slot = fds_[r->fd];
  if (!slot) {
    auto* e = new FdEntry;
    int rc = uv_poll_init(&loop_, &e->handle, r->fd);
    if (rc != 0) {
      delete e;
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
