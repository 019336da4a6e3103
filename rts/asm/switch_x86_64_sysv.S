/* switch_x86_64_sysv.S - green-thread context switch, x86-64 System V.
 *
 * void *capstan_switch(void **save_sp, void *to_sp, void *arg);
 *   Pushes the callee-saved frame (see context_frame.h) on the current stack,
 *   stores the stack pointer in *save_sp, switches to to_sp, pops that frame
 *   and returns arg there (in rax, and in rdi for a context's first entry).
 *
 * void capstan_switch_dead(void *to_sp, void *arg);   (never returns)
 *   The same switch from a context that is never resumed (a finished
 *   thread): nothing is pushed or published, and its FP control state is
 *   not read.  See "A dead context saves nothing" below.
 *
 * void *capstan_make_context(void *stack_lo, size_t size, void (*entry)(void *arg));
 *   Builds a frame at the top of a fresh stack so that the first switch to
 *   it calls entry(arg) with the ABI's entry alignment ((rsp + 8) % 16 == 0).
 *
 * The switch is a plain function in its own object: the compiler treats it
 * as an opaque call, so every caller-saved register is dead across it and
 * memory is clobbered.  Never inline it.
 *
 * The control state is read first.  stmxcsr is slow to deliver its store:
 * a load of the same slot soon after waits for it (on this project's AMD
 * EPYC machine the switch read its MXCSR back six instructions after
 * the stmxcsr, and that wait was about a tenth of a yield).  So stmxcsr is
 * the first instruction, writing below rsp into the slot the pushes then
 * frame, and the comparison that reads it back is the last thing before
 * the return.  Measured, interleaved, medians of 21: `switch 10000000
 * +RTS -N1` 14.98 -> 13.02 ns a yield; the variant that also moved fnstcw
 * first was slower (14.18), and the one that drops the comparison for an
 * unconditional ldmxcsr no faster (13.04).  docs/benchmarks.md, "Reading
 * MXCSR early".
 *
 * A dead context saves nothing.  A thread that has finished switches away
 * for the last time: its registers, its stack pointer and its control
 * state are never looked at again, so capstan_switch_dead skips the
 * pushes, the publish and the two slow stores (stmxcsr, fnstcw), and lands
 * as capstan_switch does.  Not knowing the MXCSR it leaves, it loads the
 * target's unconditionally (ldmxcsr cost nothing measurable here, where
 * stmxcsr costs most of a nanosecond); the x87 control word it still reads
 * and compares (fnstcw into the target's red zone), because an
 * unconditional fldcw was slower.  Measured, interleaved, medians of 15:
 * `threads001 1000000 +RTS -N1` 47.70 -> 42.37 ns a thread (with an
 * unconditional fldcw: 44.24), `kill 1000000` 79.86 -> 75.89 ns.
 */
#define CAPSTAN_BUILD_ASM 1
#include "asm/context_frame.h"

/* pop_frame: what capstan_switch pushed, from its FP control slot at rsp
   up to (not including) the return address: the landing of both switches. */
.macro pop_frame
        addq    $16, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
.endm

        .text
        .globl  capstan_switch
        .type   capstan_switch, @function
        .p2align 4
capstan_switch:
        .cfi_startproc
        /* See "The control state is read first" above: MXCSR goes straight
           into its slot of the frame about to be pushed (rsp - 0x40, inside
           the red zone, which no signal or interrupt may touch). */
        stmxcsr -(CAPSTAN_X64_FRAME - 8 - CAPSTAN_X64_FP_CTRL)(%rsp)
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $16, %rsp
        fnstcw  CAPSTAN_X64_FP_CTRL+4(%rsp)
        movq    %rsp, %r8               /* r8 = our frame */
        movq    %rsp, (%rdi)            /* publish our saved sp */
        movq    %rsi, %rsp              /* now on the target stack */
        /* ldmxcsr and fldcw are slow: skip them when the target's control
           state equals ours, which is the common case. */
        movzwl  CAPSTAN_X64_FP_CTRL+4(%rsp), %ecx
        cmpw    %cx, CAPSTAN_X64_FP_CTRL+4(%r8)
        jne     .Lload_x87cw
.Lx87cw_done:
        movl    CAPSTAN_X64_FP_CTRL(%rsp), %ecx
        pop_frame
        /* Our MXCSR, stored by the first instruction, is read back only
           here, 23 instructions later. */
        cmpl    %ecx, CAPSTAN_X64_FP_CTRL(%r8)
        jne     .Lload_mxcsr
.Lmxcsr_done:
        movq    %rdx, %rax
        movq    %rdx, %rdi
        ret
.Lload_mxcsr:
        /* rsp is now the target's frame + 0x40 (its return address): its
           MXCSR slot is where the first instruction wrote ours. */
        ldmxcsr -(CAPSTAN_X64_FRAME - 8 - CAPSTAN_X64_FP_CTRL)(%rsp)
        jmp     .Lmxcsr_done
.Lload_x87cw:
        fldcw   CAPSTAN_X64_FP_CTRL+4(%rsp)
        jmp     .Lx87cw_done
        .cfi_endproc
        .size   capstan_switch, .-capstan_switch

        .globl  capstan_switch_dead
        .type   capstan_switch_dead, @function
        .p2align 4
capstan_switch_dead:
        .cfi_startproc
        movq    %rdi, %rsp              /* now on the target stack; ours is dead */
        ldmxcsr CAPSTAN_X64_FP_CTRL(%rsp)
        /* Below the target's rsp: its red zone, free while it is switched out. */
        fnstcw  -8(%rsp)
        movzwl  CAPSTAN_X64_FP_CTRL+4(%rsp), %ecx
        cmpw    %cx, -8(%rsp)
        jne     .Ldead_load_x87cw
.Ldead_x87cw_done:
        pop_frame
        movq    %rsi, %rax
        movq    %rsi, %rdi
        ret
.Ldead_load_x87cw:
        fldcw   CAPSTAN_X64_FP_CTRL+4(%rsp)
        jmp     .Ldead_x87cw_done
        .cfi_endproc
        .size   capstan_switch_dead, .-capstan_switch_dead

        .globl  capstan_make_context
        .type   capstan_make_context, @function
        .p2align 4
capstan_make_context:
        .cfi_startproc
        leaq    (%rdi,%rsi), %rax       /* top = lo + size */
        andq    $-16, %rax              /* 16-aligned top */
        subq    $16, %rax               /* null return slot + pad: unwinders stop */
        movq    $0, (%rax)
        movq    $0, 8(%rax)
        subq    $CAPSTAN_X64_FRAME, %rax
        /* after the pops and ret, rsp = top-16 (16-aligned); the trampoline's
           call then enters entry with (rsp + 8) % 16 == 0 as the ABI wants. */
        movl    $CAPSTAN_DEFAULT_MXCSR, CAPSTAN_X64_FP_CTRL(%rax)
        movl    $CAPSTAN_DEFAULT_X87CW, CAPSTAN_X64_FP_CTRL+4(%rax)
        movq    $0, CAPSTAN_X64_FP_CTRL+8(%rax)
        movq    $0, CAPSTAN_X64_R15(%rax)
        movq    $0, CAPSTAN_X64_R14(%rax)
        movq    $0, CAPSTAN_X64_R13(%rax)
        movq    $0, CAPSTAN_X64_R12(%rax)
        movq    %rdx, CAPSTAN_X64_RBX(%rax)
        movq    $0, CAPSTAN_X64_RBP(%rax)
        leaq    capstan_trampoline(%rip), %rcx
        movq    %rcx, CAPSTAN_X64_RIP(%rax)
        ret
        .cfi_endproc
        .size   capstan_make_context, .-capstan_make_context

        .type   capstan_trampoline, @function
        .p2align 4
capstan_trampoline:
        .cfi_startproc
        .cfi_undefined rip              /* outermost frame of a green thread */
        xorl    %ebp, %ebp
        callq   *%rbx                   /* entry(arg): rdi = arg from the switch */
        ud2                             /* entry never returns */
        .cfi_endproc
        .size   capstan_trampoline, .-capstan_trampoline

        .section .note.GNU-stack,"",@progbits
