// raise_killed.cpp - throwing thread_killed in a green thread with one walk
// of its stack instead of two.
//
// A C++ throw walks the stack twice: the search phase goes frame by frame
// up to the first handler that matches, then the cleanup phase walks the
// same frames again, stopping in each landing pad (destructors), and enters
// the handler.  Each frame costs an FDE lookup, its CFI program and, if it
// has an LSDA, a call of the personality routine - in both phases.  A kill
// is the runtime's own exception, raised where the runtime chose, in a
// thread whose stack it knows ends in thread_entry's handler for it; GHC
// raises an asynchronous exception by walking the thread's stack once
// (raiseAsync).  raise_killed does the C++ equivalent: it skips the search
// phase and starts the cleanup phase at once.  See Note [Raising
// thread_killed in one walk].
//
// Rejected: _Unwind_ForcedUnwind (one phase too, but a forced unwind
// matches only catch (...) handlers: a `catch (const thread_killed&)` in the
// user's code would be passed by, and catching a kill and carrying on is
// legal); a cache of frames keyed by return address with our own walk
// (an unwinder of our own, for every CFI a compiler emits).
#include "schedule/raise_killed.hpp"

#include <cxxabi.h>
#include <ext/atomicity.h>
#include <unwind.h>

#include <cstddef>
#include <new>
#include <typeinfo>

#include "capability/capability.hpp"
#include "capstan/errors.hpp"
#include "primitives/sanitizer.hpp"
#include "schedule/raise.hpp"
#include "task/task.hpp"

namespace capstan::rts {

// Note [Raising thread_killed in one walk]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// __cxa_throw allocates the exception, fills in its header, counts it
// uncaught and calls _Unwind_RaiseException, whose search phase finds the
// handler and records in the header what it found there (the handler's
// frame, its selector, the caught object's address), and whose cleanup
// phase then walks to that frame.  _Unwind_Resume - which every landing
// pad calls to carry on once its destructors have run - is the cleanup
// phase alone, from its caller's frame up, choosing by the exception's
// private_1 field (0: not a forced unwind) to continue a raise.
// raise_killed makes the exception as __cxa_throw does and calls
// _Unwind_Resume with no frame recorded (private_2 = 0, no frame has that
// address), so no frame is taken for the one the search would have found.
// What enters the handler then is libstdc++'s personality routine: in the
// cleanup phase, for a frame that is not the recorded one, it still reads
// the frame's action table against the thrown type, and a catch clause that
// matches - the user's `catch (const thread_killed&)` or `catch (...)`,
// else invoke's or thread_entry's - gets its landing pad with the clause's
// selector, exactly where the search would have stopped.  The one thing the
// search would have recorded that the handler reads is the caught object's
// address (__cxa_begin_catch returns it); thread_killed has no base class,
// so every clause that can match catches the object itself, and the header
// says so before the walk.  A frame that would have terminated the
// program (a noexcept function) terminates it in the cleanup phase
// instead, once the frames below it are unwound - as GCC's own throws do
// for a handler-less exception.  A rethrow (`throw;`) from a handler is an
// ordinary two-phase raise from there.
//
// This leans on three things beyond the Itanium C++ ABI's letter, each
// checked: the exception header's layout (libstdc++'s, asserted below,
// and at run time that the header ends where the object starts), the
// personality routine's matching in the cleanup phase (libstdc++'s;
// LLVM's libc++abi considers only cleanups there, so other libraries
// throw as before: the #if below), and a handler below the raise: only a
// green thread, whose stack starts in thread_entry's catch, raises this
// way.  Under AddressSanitizer the stack's shadow is cleared first, as
// ASan's own __cxa_throw interceptor does.
//
// What it saves, callgrind, `shutdown` (100,000 threads blocked at exit,
// a third each on mvars, sleeps and fd waits; per thread, `shutdown
// 10000` less `shutdown 5000`, -N1): 25,802 -> 17,581 instructions for a
// thread's whole life, against 17,850 for one floor throw through the
// user's single frame.  Interleaved, -N1, medians of 9: `shutdown 100000`
// 2.44 -> 2.04x the floor, `threads007 20000` 2.40 -> 1.93x, `killblocked
// 100000 5` 5.38 -> 3.96 us per thread (1.48 -> 1.15x).  A stand-alone
// throw through one frame with a destructor: 1,214-1,312 ns as a throw,
// 862-895 ns raised this way (0.68-0.71); through five frames 0.74-0.75.
//
// The frames the walk starts with are the runtime's, and the fewer the
// better: raise_outcome, which the blocking calls' inline park calls when a
// wait ended without a value, jumps to raise_killed rather than calling it
// (raise_killed is declared as returning: GCC keeps the frame of any
// caller of a noreturn function, for backtraces), so a killed mvar or chan
// waiter's walk begins in raise_killed's frame and goes straight to the
// user's; a killed sleeper's or fd waiter's too (Note [A killed IO wait
// leaves no frame] in io/entry_points.cpp).  Callgrind, `shutdown` as
// above: 17,538 -> 16,349 instructions a thread, one FDE lookup fewer a
// kill (7.67 -> 6.67); interleaved, -N1, medians of 7: shutdown 1.61 ->
// 1.53x the floor, threads007 1.54 -> 1.46x, killblocked 1.13 -> 1.09x.
//
// Tested by tests/rts/schedule/raise_killed_test.cpp.

namespace {

#if defined(__GLIBCXX__) && !defined(__USING_SJLJ_EXCEPTIONS__) && !defined(__ARM_EABI_UNWINDER__)
#define CAPSTAN_RAISE_IN_ONE_WALK 1
// libstdc++'s exception header (libsupc++/unwind-cxx.h), the layout
// __cxa_init_primary_exception returns a pointer to.
struct CxaException {
  std::type_info* exception_type;
  void (*exception_destructor)(void*);
  void (*unexpected_handler)();
  void (*terminate_handler)();
  CxaException* next_exception;
  int handler_count;
  int handler_switch_value;
  const unsigned char* action_record;
  const unsigned char* language_specific_data;
  _Unwind_Ptr catch_temp;
  void* adjusted_ptr;  // the caught object, as __cxa_begin_catch returns it
  _Unwind_Exception unwind_header;
};
struct CxaRefcountedException {
  _Atomic_word reference_count;
  CxaException exc;
};
struct CxaEhGlobals {
  CxaException* caught_exceptions;
  unsigned int uncaught_exceptions;
};
// The header ends where the object starts: nothing after unwind_header.
static_assert(offsetof(CxaRefcountedException, exc) + offsetof(CxaException, unwind_header) +
                  sizeof(_Unwind_Exception) ==
              sizeof(CxaRefcountedException));
#endif

}  // namespace

bool raise_killed(bool by_kill_thread) {
  if (by_kill_thread) count_raised();
#ifdef CAPSTAN_RAISE_IN_ONE_WALK
  Task* task = my_task_before_switch();
  if (task && task->cap && task->cap->current) [[likely]] {  // a green thread: thread_entry's catch
    void* obj = __cxxabiv1::__cxa_allocate_exception(sizeof(thread_killed));
    new (obj) thread_killed{};
    auto* h = reinterpret_cast<CxaRefcountedException*>(__cxxabiv1::__cxa_init_primary_exception(
        obj, const_cast<std::type_info*>(&typeid(thread_killed)), nullptr));
    if (reinterpret_cast<char*>(h + 1) == static_cast<char*>(obj)) [[likely]] {
      // As __cxa_throw: counted uncaught until a handler begins.
      reinterpret_cast<CxaEhGlobals*>(__cxxabiv1::__cxa_get_globals())->uncaught_exceptions += 1;
      h->reference_count = 1;
      h->exc.adjusted_ptr = obj;  // no base class: every matching clause catches obj itself
      if (&__asan_handle_no_return != nullptr) __asan_handle_no_return();
      _Unwind_Resume(&h->exc.unwind_header);  // never returns: thread_entry's catch at the latest
    }
    __cxxabiv1::__cxa_free_exception(obj);
  }
#endif
  throw thread_killed{};
}

}  // namespace capstan::rts
