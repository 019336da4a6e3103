/* context_frame.h - the saved-context frame of capstan_switch, per ABI.
 *
 * Shared by the .S files (CAPSTAN_BUILD_ASM defined) and by context.hpp,
 * which static_asserts the layout against a C struct.  A context *is* a
 * stack pointer: capstan_switch pushes the frame below on the current stack,
 * stores the stack pointer, loads the target's and pops its frame.
 *
 * Frame table (offsets from the saved stack pointer, bytes):
 *
 *   x86-64 System V                     AArch64 (AAPCS64)
 *   0x00 MXCSR (4) + x87 CW (2) + pad   0x00 d8  d9
 *   0x10 r15                            0x10 d10 d11
 *   0x18 r14                            0x20 d12 d13
 *   0x20 r13                            0x30 d14 d15
 *   0x28 r12                            0x40 x19 x20
 *   0x30 rbx                            0x50 x21 x22
 *   0x38 rbp                            0x60 x23 x24
 *   0x40 return address (rip)           0x70 x25 x26
 *                                       0x80 x27 x28
 *                                       0x90 x29 (fp) x30 (lr = resume pc)
 *                                       0xa0 FPCR, pad
 *
 * Only what the ABI makes callee-saved is kept, plus the floating-point
 * control state: green threads migrate between OS threads, so a thread that
 * changed its rounding mode must carry it, and must not leak it to the next
 * thread scheduled on the same OS thread.
 */
#ifndef CAPSTAN_RTS_ASM_CONTEXT_FRAME_H
#define CAPSTAN_RTS_ASM_CONTEXT_FRAME_H

#define CAPSTAN_X64_FP_CTRL   0x00
#define CAPSTAN_X64_R15       0x10
#define CAPSTAN_X64_R14       0x18
#define CAPSTAN_X64_R13       0x20
#define CAPSTAN_X64_R12       0x28
#define CAPSTAN_X64_RBX       0x30
#define CAPSTAN_X64_RBP       0x38
#define CAPSTAN_X64_RIP       0x40
#define CAPSTAN_X64_FRAME     0x48 /* bytes pushed below the caller's sp, incl. return address */

#define CAPSTAN_A64_D8        0x00
#define CAPSTAN_A64_X19       0x40
#define CAPSTAN_A64_X29       0x90
#define CAPSTAN_A64_X30       0x98
#define CAPSTAN_A64_FPCR      0xa0
#define CAPSTAN_A64_FRAME     0xb0

/* Default floating-point control state of a new green thread: round to
 * nearest, all exceptions masked (the values a fresh process starts with). */
#define CAPSTAN_DEFAULT_MXCSR 0x1f80
#define CAPSTAN_DEFAULT_X87CW 0x037f
/* AArch64: FPCR 0 - round to nearest, no flush-to-zero, no default NaN,
 * exception traps off (tests/rts/asm/switch_aarch64_test.cpp checks it). */
#define CAPSTAN_DEFAULT_FPCR  0

#endif
