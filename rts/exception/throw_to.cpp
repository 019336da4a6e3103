// throw_to.cpp - the public calls of capstan/async_exception.hpp: throw_to
// and kill_thread (the thrower's half: posting, then waiting for the
// target to raise it), masks, and state_of.  The target's half - raising -
// is schedule/raise.cpp: Note [Raising asynchronously].
//
// Note [Waiting for a throw to land]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// As in GHC, throw_to returns only once the exception has been raised in
// the target (or the target has finished).  When post_throw queued the
// message, the thrower waits on a private mvar_core in its own frame; the
// target's on_done sets `done` and serves the thrower under that lock, and
// the unlock is its last touch of the frame (Note [Waking after unlock]).
// The wait is an ordinary interruptible block: a thrower that is itself
// thrown to takes its message back (retract_throw) and leaves with its own
// exception; if the target had already taken the message, on_done is
// running or about to, and the thrower waits for `done` before its frame
// goes.  So a throw lands exactly once or not at all, and the thrower never
// outlives a reference to its frame.
#include <exception>
#include <mutex>

#include "capstan/async_exception.hpp"
#include "capstan/detail/mvar_core.hpp"
#include "capstan/errors.hpp"
#include "primitives/spin.hpp"
#include "runtime/runtime.hpp"
#include "schedule/raise.hpp"
#include "schedule/schedule.hpp"
#include "task/green_thread.hpp"
#include "thread/threads.hpp"

namespace capstan::detail {

using rts::Thread;

namespace {

struct landing {
  mvar_core core;
  bool done = false;  // [lock: core]
};

void on_landed(throw_msg* m) noexcept {
  auto* l = static_cast<landing*>(m->waiter);
  l->core.lock();
  l->done = true;
  Thread* thrower = nullptr;
  if (waiter* w = l->core.front()) thrower = l->core.serve(*w);
  l->core.unlock();  // last touch of the thrower's frame
  if (thrower) rts::wake(thrower);
}

void wait_landed(landing& l) {
  for (rts::SpinWait spin;; spin.turn()) {
    l.core.lock();
    bool done = l.done;
    l.core.unlock();
    if (done) return;
  }
}

Thread* current(const char* what) { return rts::require_green_thread(what)->cap->current; }

}  // namespace

void throw_to_ptr(thread_ref ref, std::exception_ptr e, const char* what) {
  Thread* cur = current(what);
  if (ref.id == cur->id) std::rethrow_exception(std::move(e));  // to self: synchronous
  rts::check_thread_id(ref.id, what);
  rts::enable_wait_locks();
  Thread* t = rts::thread_of(ref);
  if (!t) {
    safe_point();
    return;  // finished: nothing to do
  }
  landing l;
  throw_msg m;
  m.ex = std::move(e);
  m.on_done = &on_landed;
  m.waiter = &l;
  if (rts::post_throw(t, ref.id, &m) != rts::Posted::queued) {
    safe_point();
    return;  // raised in a blocked thread at once, or it had finished
  }
  l.core.lock();
  if (l.done) {
    l.core.unlock();
    return;
  }
  waiter w(waiter::throw_to);
  w.slot = t;  // the target, for deadlock detection: Note [Breaking a deadlock]
  l.core.enqueue(w);
  try {
    l.core.park(w);  // See Note [Waiting for a throw to land]
  } catch (...) {
    if (!rts::retract_throw(t, &m)) wait_landed(l);
    throw;
  }
}

const std::exception_ptr& thread_killed_ptr() {
  static const std::exception_ptr p = std::make_exception_ptr(thread_killed{});
  return p;
}

mask_state set_mask(mask_state s) {
  Thread* cur = current("capstan::mask");
  auto prev = static_cast<mask_state>(cur->mask);
  cur->mask = static_cast<rts::Mask>(s);
  return prev;
}

bool green_thread_here() noexcept { return rts::green_task() != nullptr; }

mask_state raise_mask(mask_state at_least) {
  Thread* cur = current("capstan::mask");
  auto prev = static_cast<mask_state>(cur->mask);
  if (static_cast<std::uint8_t>(at_least) > static_cast<std::uint8_t>(prev))
    cur->mask = static_cast<rts::Mask>(at_least);
  return prev;
}

void check_unmasked() {
  rts::raise_pending(current("capstan::mask"), false);
}

}  // namespace capstan::detail

namespace capstan {

static_assert(static_cast<int>(mask_state::unmasked) == static_cast<int>(rts::Mask::unmasked) &&
              static_cast<int>(mask_state::masked_interruptible) ==
                  static_cast<int>(rts::Mask::interruptible) &&
              static_cast<int>(mask_state::masked_uninterruptible) ==
                  static_cast<int>(rts::Mask::uninterruptible));

mask_state get_mask_state() {
  return static_cast<mask_state>(detail::current("capstan::get_mask_state")->mask);
}

thread_state state_of(thread_id id) {
  detail::thread_ref ref = id.ref();
  rts::Thread* cur = detail::current("capstan::state_of");
  if (ref.id == cur->id) return thread_state::running;
  rts::check_thread_id(ref.id, "capstan::state_of");
  rts::enable_wait_locks();  // blocked_on is read under wait_lock (Note [Wait locks])
  thread_state s = thread_state::finished;
  bool live = false;
  if (rts::Thread* t = rts::thread_of(ref)) {
    t->wait_lock.lock();
    if (t->live_id.load(std::memory_order_relaxed) == ref.id) {
      live = true;
      s = t->blocked_on ? thread_state::blocked : thread_state::running;
    }
    t->wait_lock.unlock();
  }
  if (!live && rts::rt.fates.has_died(ref.id)) s = thread_state::died;
  detail::safe_point();
  return s;
}

}  // namespace capstan
