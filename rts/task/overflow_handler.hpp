// overflow_handler.hpp - name the green thread whose stack overflowed.
//
// Every stack has a guard page below it (stack.hpp); running into it raises
// SIGSEGV on the overflowing stack, where no handler could run.  So every
// OS thread the runtime makes or runs on from the start (main's, workers,
// spares, fork_os threads) gets an alternate signal stack, and one SIGSEGV
// handler (SA_ONSTACK | SA_SIGINFO) checks whether the faulting address is
// in the guard page of the green thread its Task is running.  If so it writes
// "capstan: stack overflow in thread N (label)..." with write(2) - async-
// signal-safe - and re-raises with the previous disposition, so core dumps
// and debuggers still see the fault.  Any other SIGSEGV goes straight to the
// previous handler.  An overflow cannot become a C++ exception: unwinding
// out of a signal handler is undefined behaviour.  A foreign OS thread that
// calls in (call_in) keeps the signal stack it has, if any: the runtime
// does not change a thread it does not own, so an overflow there is
// reported by name only if that thread set up an alternate stack itself,
// and is otherwise the kernel's plain SIGSEGV.
#pragma once

namespace capstan::rts {

struct Task;
struct Thread;

// report_stack_overflow writes "capstan: stack overflow in thread N
// (label): ..." to stderr with write(2): async-signal-safe, for the SIGSEGV
// handler and for the switch's software check (schedule/switch.hpp).
void report_stack_overflow(const Thread* t) noexcept;

// install_overflow_handler installs the process-wide handler (once per run).
void install_overflow_handler();
// The calling OS thread gets an alternate signal stack for task's lifetime.
void enter_signal_stack(Task* task);
void leave_signal_stack(Task* task);

}  // namespace capstan::rts
