// context_ucontext.cpp - portable fallback for capstan_switch, on ucontext.
//
// Chosen with `meson configure -Dcontext=ucontext` (or automatically on an
// architecture without a .S file).  Much slower than the assembly (glibc's
// swapcontext makes a sigprocmask system call), but it keeps the same
// contract: a "stack pointer" here is a pointer to a Frame holding the
// ucontext_t.  glibc's swapcontext saves and restores MXCSR/x87 CW (x86-64)
// and FPCR (AArch64) as part of the FP environment.
#include <ucontext.h>

#include <cstdint>
#include <cstdlib>

#include "asm/context.hpp"

namespace {

struct Frame {
  ucontext_t uc;
  void* arg;                    // set by the switcher before resuming us
  void (*entry)(void*);
};

void trampoline(unsigned hi, unsigned lo) {
  auto* f = reinterpret_cast<Frame*>((static_cast<std::uintptr_t>(hi) << 32) |
                                     static_cast<std::uintptr_t>(lo));
  f->entry(f->arg);
  std::abort();  // entry never returns
}

}  // namespace

extern "C" void* capstan_switch(void** save_sp, void* to_sp, void* arg) {
  Frame me;
  *save_sp = &me;
  auto* to = static_cast<Frame*>(to_sp);
  to->arg = arg;
  swapcontext(&me.uc, &to->uc);
  return me.arg;
}

extern "C" void capstan_switch_dead(void* to_sp, void* arg) {
  void* discard;  // nobody resumes a dead context
  capstan_switch(&discard, to_sp, arg);
  std::abort();
}

extern "C" void* capstan_make_context(void* stack_lo, std::size_t size,
                                     void (*entry)(void* arg)) {
  auto lo = reinterpret_cast<std::uintptr_t>(stack_lo);
  auto top = (lo + size) & ~std::uintptr_t{63};
  auto* f = reinterpret_cast<Frame*>(top - ((sizeof(Frame) + 63) & ~std::size_t{63}));
  getcontext(&f->uc);
  f->entry = entry;
  f->arg = nullptr;
  // The usable stack is everything below the Frame.
  f->uc.uc_stack.ss_sp = stack_lo;
  f->uc.uc_stack.ss_size = reinterpret_cast<std::uintptr_t>(f) - lo;
  f->uc.uc_link = nullptr;
  auto p = reinterpret_cast<std::uintptr_t>(f);
  makecontext(&f->uc, reinterpret_cast<void (*)()>(trampoline), 2,
              static_cast<unsigned>(p >> 32), static_cast<unsigned>(p & 0xffffffffu));
  return f;
}
