// context.hpp - the machine context of a green thread: one saved stack pointer.
//
// capstan_switch / capstan_switch_dead / capstan_make_context are implemented
// per ABI in this folder (switch_x86_64_sysv.S, switch_aarch64.S) or by the
// portable ucontext fallback (context_ucontext.cpp), chosen at configure time
// (meson option `context`).
// Everything above this header sees one contract:
//
//   void* sp = capstan_make_context(stack_lo, stack_size, entry);
//   void* arg = capstan_switch(&my_saved_sp, sp, arg);   // resumes entry(arg)
//
// The frame layout lives in context_frame.h; the static_asserts below pin it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "asm/context_frame.h"

extern "C" {
// capstan_switch saves the current context in *save_sp, resumes to_sp, and
// returns `arg` (as passed by whoever later switches back to us).
void* capstan_switch(void** save_sp, void* to_sp, void* arg);
// capstan_switch_dead resumes to_sp (returning arg there) from a context
// that will never be resumed - a finished thread: nothing of it is saved.
[[noreturn]] void capstan_switch_dead(void* to_sp, void* arg);
// capstan_make_context prepares a fresh stack whose first resumption calls
// entry(arg); entry must never return.
void* capstan_make_context(void* stack_lo, std::size_t size, void (*entry)(void* arg));
}

namespace capstan::rts {

#if defined(CAPSTAN_CONTEXT_ASM) && defined(__x86_64__)
struct X64Frame {
  std::uint32_t mxcsr;
  std::uint16_t x87cw;
  std::uint16_t pad0;
  std::uint64_t pad1;
  std::uint64_t r15, r14, r13, r12, rbx, rbp, rip;
};
static_assert(offsetof(X64Frame, mxcsr) == CAPSTAN_X64_FP_CTRL);
static_assert(offsetof(X64Frame, x87cw) == CAPSTAN_X64_FP_CTRL + 4);
static_assert(offsetof(X64Frame, r15) == CAPSTAN_X64_R15);
static_assert(offsetof(X64Frame, r12) == CAPSTAN_X64_R12);
static_assert(offsetof(X64Frame, rbx) == CAPSTAN_X64_RBX);
static_assert(offsetof(X64Frame, rbp) == CAPSTAN_X64_RBP);
static_assert(offsetof(X64Frame, rip) == CAPSTAN_X64_RIP);
static_assert(sizeof(X64Frame) == CAPSTAN_X64_FRAME);
// capstan_switch's first instruction stores MXCSR below rsp, into the slot
// its pushes then frame (switch_x86_64_sysv.S, "The control state is read
// first"): the slot must lie within the System V red zone (128 bytes).
static_assert(CAPSTAN_X64_FRAME - 8 - CAPSTAN_X64_FP_CTRL <= 128);
#elif defined(CAPSTAN_CONTEXT_ASM) && defined(__aarch64__)
struct A64Frame {
  double d[8];
  std::uint64_t x19_28[10];
  std::uint64_t x29, x30;
  std::uint64_t fpcr, pad;
};
static_assert(offsetof(A64Frame, x19_28) == CAPSTAN_A64_X19);
static_assert(offsetof(A64Frame, x29) == CAPSTAN_A64_X29);
static_assert(offsetof(A64Frame, x30) == CAPSTAN_A64_X30);
static_assert(offsetof(A64Frame, fpcr) == CAPSTAN_A64_FPCR);
static_assert(sizeof(A64Frame) == CAPSTAN_A64_FRAME);
#endif

}  // namespace capstan::rts
