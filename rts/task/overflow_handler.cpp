// overflow_handler.cpp - see overflow_handler.hpp.
#include "task/overflow_handler.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "capability/capability.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"

namespace capstan::rts {

namespace {

constexpr std::size_t kAltStack = 64 * 1024;  // SIGSTKSZ is too small for our message
struct sigaction previous;
bool installed = false;

void on_segv(int sig, siginfo_t* info, void* uctx) {
  Task* task = my_task();
  Thread* t = task && task->cap ? task->cap->current : nullptr;
  if (t && t->stack_lo && rt.arena.is_guard_page(info->si_addr, t->stack_lo))
    report_stack_overflow(t);
  // Hand the fault to whoever had SIGSEGV before us (default: die, dump core).
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) {
      previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void report_stack_overflow(const Thread* t) noexcept {
  char buf[256];
  const char* label = t->label ? t->label->c_str() : t->is_main ? "main" : "unlabelled";
  int n = std::snprintf(buf, sizeof buf,
                        "capstan: stack overflow in thread %llu (%s): its stack of %zu bytes "
                        "is exhausted (raise it with +RTS -K<size>)\n",
                        static_cast<unsigned long long>(t->id), label, rt.arena.size());
  if (n > 0) (void)!write(2, buf, static_cast<std::size_t>(n));
}

void install_overflow_handler() {
  if (installed) return;
  struct sigaction sa {};
  sa.sa_sigaction = &on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &previous) == 0) installed = true;
}

void enter_signal_stack(Task* task) {
  task->alt_stack = std::malloc(kAltStack);
  if (!task->alt_stack) return;
  stack_t ss{};
  ss.ss_sp = task->alt_stack;
  ss.ss_size = kAltStack;
  if (sigaltstack(&ss, &task->prev_alt_stack) != 0) {
    std::free(task->alt_stack);
    task->alt_stack = nullptr;
  }
}

void leave_signal_stack(Task* task) {
  if (!task->alt_stack) return;
  sigaltstack(&task->prev_alt_stack, nullptr);
  std::free(task->alt_stack);
  task->alt_stack = nullptr;
}

}  // namespace capstan::rts
