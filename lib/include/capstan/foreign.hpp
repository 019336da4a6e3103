// foreign.hpp - calls out of and into the runtime: safe foreign calls, bound
// threads, in-calls (GHC's `foreign import ccall safe`, forkOS, rts_evalIO).
//
// A plain C++ call from a green thread is GHC's *unsafe* call: it holds the
// capability, so a call that blocks in the OS stalls every other green
// thread of that capability until it returns.  Wrap such calls in
// safe_call.  See docs/foreign.md.
#pragma once

#include <exception>
#include <type_traits>
#include <utility>

#include "capstan/detail/bridge.hpp"
#include "capstan/detail/outcome.hpp"
#include "capstan/thread.hpp"

namespace capstan {

namespace detail {
// Opaque state of one safe call, between enter and leave.
struct safe_call_frame {
  rts::Task* task = nullptr;
  rts::Thread* thread = nullptr;
  rts::Capability* cap = nullptr;
};
void safe_call_enter(safe_call_frame& f);
// safe_call_leave gets the capability back; `f_threw` says whether f threw
// (then no thread_killed is raised, so f's exception is what propagates).
void safe_call_leave(safe_call_frame& f, bool f_threw);
// call_in_raw runs fn(ctx) as a bound green thread and waits for it; fn
// must not throw (the template wrapper catches everything).
void call_in_raw(void (*fn)(void*), void* ctx);
}  // namespace detail

// safe_call runs f() on the calling OS thread after releasing the capability,
// so other green threads keep running meanwhile; when f returns the caller
// takes its capability back (ahead of ordinary scheduling) and returns f's
// result or rethrows its exception.  Call only from a green thread.
template <class F>
auto safe_call(F&& f) -> std::invoke_result_t<F&> {
  detail::outcome<std::invoke_result_t<F&>> out;
  detail::safe_call_frame frame;
  detail::safe_call_enter(frame);
  out.capture(f);
  detail::safe_call_leave(frame, out.failed());
  return out.get();
}

// fork_os starts f() as a green thread bound to a new OS thread (GHC's
// forkOS): it always runs on that OS thread, whichever capability it uses.
template <class F>
thread_id fork_os(F&& f) {
  return thread_id{detail::spawn<F>(detail::kBoundOsThread, std::forward<F>(f))};
}

// is_bound tells whether the calling green thread is bound to an OS thread
// (run()'s main thread, fork_os threads and in-calls are).
bool is_bound();

// call_in runs f() as a bound green thread from an OS thread that is not
// running one (a C library's callback thread, or C code called through
// safe_call), waits for it, and returns its result or rethrows its
// exception.  usage_error if no runtime is running or it is shutting down.
template <class F>
auto call_in(F&& f) -> std::invoke_result_t<F&> {
  detail::outcome<std::invoke_result_t<F&>> out;
  auto counted = detail::counting(f);  // for statistics()
  auto body = [&] { out.capture(counted); };
  detail::call_in_raw([](void* b) { (*static_cast<decltype(body)*>(b))(); }, &body);
  return out.get();
}

}  // namespace capstan
