/* switch_aarch64.S - green-thread context switch, AArch64 (AAPCS64).
 *
 * Same contract as switch_x86_64_sysv.S: capstan_switch(save_sp, to_sp, arg)
 * saves x19-x29, x30, d8-d15 and FPCR (see context_frame.h), returns arg on
 * the target context (x0).  x29 (the frame pointer) must be saved too: it is
 * callee-saved in AAPCS64, and unwinders follow it.
 */
#define CAPSTAN_BUILD_ASM 1
#include "asm/context_frame.h"

/* land: the landing of both switches, on the target's frame at sp with
   the current FPCR in x9: its FPCR loaded if it differs (msr is slow),
   then what capstan_switch stored, and the frame popped. */
.macro land
        ldr     x10, [sp, #CAPSTAN_A64_FPCR]
        cmp     x9, x10
        b.eq    1f
        msr     fpcr, x10
1:
        ldp     d8,  d9,  [sp, #0x00]
        ldp     d10, d11, [sp, #0x10]
        ldp     d12, d13, [sp, #0x20]
        ldp     d14, d15, [sp, #0x30]
        ldp     x19, x20, [sp, #0x40]
        ldp     x21, x22, [sp, #0x50]
        ldp     x23, x24, [sp, #0x60]
        ldp     x25, x26, [sp, #0x70]
        ldp     x27, x28, [sp, #0x80]
        ldp     x29, x30, [sp, #0x90]
        add     sp, sp, #CAPSTAN_A64_FRAME
.endm

        .text
        .globl  capstan_switch
        .type   capstan_switch, %function
        .p2align 4
capstan_switch:
        sub     sp, sp, #CAPSTAN_A64_FRAME
        stp     d8,  d9,  [sp, #0x00]
        stp     d10, d11, [sp, #0x10]
        stp     d12, d13, [sp, #0x20]
        stp     d14, d15, [sp, #0x30]
        stp     x19, x20, [sp, #0x40]
        stp     x21, x22, [sp, #0x50]
        stp     x23, x24, [sp, #0x60]
        stp     x25, x26, [sp, #0x70]
        stp     x27, x28, [sp, #0x80]
        stp     x29, x30, [sp, #0x90]
        mrs     x9, fpcr
        str     x9, [sp, #CAPSTAN_A64_FPCR]
        mov     x10, sp
        str     x10, [x0]
        mov     sp, x1
        land
        mov     x0, x2
        ret
        .size   capstan_switch, .-capstan_switch

        /* capstan_switch_dead(to_sp, arg): the same landing from a context
           that is never resumed (a finished thread): nothing is saved.
           See "A dead context saves nothing" in switch_x86_64_sysv.S. */
        .globl  capstan_switch_dead
        .type   capstan_switch_dead, %function
        .p2align 4
capstan_switch_dead:
        mrs     x9, fpcr
        mov     sp, x0
        land
        mov     x0, x1
        ret
        .size   capstan_switch_dead, .-capstan_switch_dead

        .globl  capstan_make_context
        .type   capstan_make_context, %function
        .p2align 4
capstan_make_context:
        add     x0, x0, x1              /* top = lo + size */
        and     x0, x0, #~15
        sub     x0, x0, #CAPSTAN_A64_FRAME
        mov     x9, #0
        mov     x10, #0
        .irp    off, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0
        stp     x9, x10, [x0, #\off]
        .endr
        mov     x9, #CAPSTAN_DEFAULT_FPCR      /* not the creator's: see context_frame.h */
        str     x9, [x0, #CAPSTAN_A64_FPCR]
        str     x2, [x0, #CAPSTAN_A64_X19]     /* entry */
        adr     x9, capstan_trampoline
        str     x9, [x0, #CAPSTAN_A64_X30]     /* first "return" lands here */
        ret
        .size   capstan_make_context, .-capstan_make_context

        .type   capstan_trampoline, %function
        .p2align 4
capstan_trampoline:
        .cfi_startproc
        .cfi_undefined x30              /* outermost frame of a green thread */
        mov     x29, #0
        blr     x19                     /* entry(arg): x0 = arg from the switch */
        brk     #0                      /* entry never returns */
        .cfi_endproc
        .size   capstan_trampoline, .-capstan_trampoline

        .section .note.GNU-stack,"",%progbits
