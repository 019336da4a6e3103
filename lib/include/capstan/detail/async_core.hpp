// detail/async_core.hpp - the records behind throw_to and timeout that
// live in the caller's frame.  Not part of the API.
// See Note [Raising asynchronously] in rts/schedule/raise.cpp.
#pragma once

#include <cstdint>
#include <exception>

#include "capstan/detail/bridge.hpp"

namespace capstan::detail {

// throw_msg: one exception thrown to a thread and not yet raised in it
// (GHC's MessageThrowTo).  It lives in the thrower's frame (throw_to, or a
// timeout's frame) and sits on the target's pending list until the target
// raises it, finishes, or the thrower takes it back.
struct throw_msg {
  enum outcome_t : std::uint8_t { pending, raised, target_finished };
  throw_msg* next = nullptr;   // [lock: the target's wait_lock]
  throw_msg* prev = nullptr;   // [lock: the target's wait_lock]
  bool queued = false;         // [lock: the target's wait_lock] on the pending list
  outcome_t outcome = pending; // set before on_done is called
  std::exception_ptr ex;       // what to raise: written before posting
  // on_done is called exactly once by the party that took the message off
  // the pending list for good (the target raising it or finishing), with
  // no lock held; once it returns the message may be gone.  Null: nobody
  // waits for it (a timeout's message, which its owner takes back itself).
  void (*on_done)(throw_msg*) noexcept = nullptr;
  void* waiter = nullptr;      // for on_done: whatever the thrower waits on
  // Raise it only while exactly this many exceptions are in flight in the
  // target (std::uncaught_exceptions()): 0, except for a timeout begun in
  // a destructor run by an exception, whose catch lies inside that
  // destructor (Note [Timeouts begun while unwinding], rts/io/timeouts.cpp).
  unsigned in_flight = 0;
};

// timeout_frame: one timeout() in progress, innermost first.  Fields are
// the owner thread's, except where a lock is named (the owner's wait_lock).
struct timeout_frame {
  timeout_frame* outer = nullptr;
  std::int64_t deadline_ns = 0;    // steady clock
  std::uint64_t thread = 0;        // the owner's id
  std::uint64_t token = 0;         // unique for the owner: timeout_expired's token
  bool armed = false;              // an IO-manager timer was registered for it
  bool fired = false;              // [lock] its exception was posted
  bool firing = false;             // [lock] the timer is posting it right now
  timeout_frame* armed_next = nullptr;  // [lock] the owner's armed frames
  timeout_frame* armed_prev = nullptr;  // [lock]
  void* timer = nullptr;           // the IO manager's handle, once armed
  throw_msg msg;                   // the timeout_expired exception, once fired
};

// timeout_push starts frame f (deadline `ns` from now) on the calling green
// thread; timeout_pop ends it (the innermost), whatever happened.
void timeout_push(timeout_frame& f, long long ns);
void timeout_pop(timeout_frame& f) noexcept;

}  // namespace capstan::detail
