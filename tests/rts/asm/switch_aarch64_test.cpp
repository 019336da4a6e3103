// switch_aarch64_test.cpp - what switch_aarch64.S promises, register by
// register: x19-x28, x29 and d8-d15 survive a switch in both directions,
// FPCR (rounding mode, flush-to-zero, default-NaN) belongs to each context,
// and a new context is entered with a 16-aligned sp at the top of its stack,
// x29 = 0 and a return address in the trampoline.
//
// switch_test.cpp checks the same contract through C++ (values the compiler
// happens to keep in callee-saved registers, fegetround); here small
// assembly helpers set and read every register the frame holds, so none
// can be missed.  Built only when the AArch64 switch is (tests/meson.build).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "asm/context.hpp"

#if !defined(__aarch64__) || !defined(CAPSTAN_CONTEXT_ASM)
#error "switch_aarch64_test.cpp tests switch_aarch64.S: build it only for AArch64 with -Dcontext=asm"
#endif

// kRegs values: x19..x28 (10), x29, d8..d15 (8 raw bit patterns).
constexpr int kRegs = 19;

extern "C" {
// capstan_test_switch_with: loads x19-x29 and d8-d15 from in[0..18], calls
// capstan_switch(save_sp, to_sp, arg), then stores the same registers into
// out[0..18], sp before the switch into out[19] and sp after into out[20].
// Restores its caller's callee-saved registers before returning.
void* capstan_test_switch_with(void** save_sp, void* to_sp, void* arg, const std::uint64_t* in,
                               std::uint64_t* out);
// capstan_test_probe_entry: an entry for capstan_make_context that records
// sp, x29 and x30 exactly as the trampoline left them (into the
// std::uint64_t[3] passed as arg), then tail-calls probe_entry_body(arg).
void capstan_test_probe_entry(void* arg);
[[noreturn]] void probe_entry_body(void* arg);
}

asm(R"(
        .text
        .globl  capstan_test_switch_with
        .type   capstan_test_switch_with, %function
        .p2align 4
capstan_test_switch_with:
        sub     sp, sp, #0xb0
        stp     x29, x30, [sp, #0x00]
        stp     x19, x20, [sp, #0x10]
        stp     x21, x22, [sp, #0x20]
        stp     x23, x24, [sp, #0x30]
        stp     x25, x26, [sp, #0x40]
        stp     x27, x28, [sp, #0x50]
        stp     d8,  d9,  [sp, #0x60]
        stp     d10, d11, [sp, #0x70]
        stp     d12, d13, [sp, #0x80]
        stp     d14, d15, [sp, #0x90]
        str     x4, [sp, #0xa0]
        mov     x5, sp
        str     x5, [x4, #0x98]
        ldp     x19, x20, [x3, #0x00]
        ldp     x21, x22, [x3, #0x10]
        ldp     x23, x24, [x3, #0x20]
        ldp     x25, x26, [x3, #0x30]
        ldp     x27, x28, [x3, #0x40]
        ldr     x29, [x3, #0x50]
        ldp     d8,  d9,  [x3, #0x58]
        ldp     d10, d11, [x3, #0x68]
        ldp     d12, d13, [x3, #0x78]
        ldp     d14, d15, [x3, #0x88]
        bl      capstan_switch
        ldr     x4, [sp, #0xa0]
        stp     x19, x20, [x4, #0x00]
        stp     x21, x22, [x4, #0x10]
        stp     x23, x24, [x4, #0x20]
        stp     x25, x26, [x4, #0x30]
        stp     x27, x28, [x4, #0x40]
        str     x29, [x4, #0x50]
        stp     d8,  d9,  [x4, #0x58]
        stp     d10, d11, [x4, #0x68]
        stp     d12, d13, [x4, #0x78]
        stp     d14, d15, [x4, #0x88]
        mov     x5, sp
        str     x5, [x4, #0xa0]
        ldp     x29, x30, [sp, #0x00]
        ldp     x19, x20, [sp, #0x10]
        ldp     x21, x22, [sp, #0x20]
        ldp     x23, x24, [sp, #0x30]
        ldp     x25, x26, [sp, #0x40]
        ldp     x27, x28, [sp, #0x50]
        ldp     d8,  d9,  [sp, #0x60]
        ldp     d10, d11, [sp, #0x70]
        ldp     d12, d13, [sp, #0x80]
        ldp     d14, d15, [sp, #0x90]
        add     sp, sp, #0xb0
        ret
        .size   capstan_test_switch_with, .-capstan_test_switch_with

        .globl  capstan_test_probe_entry
        .type   capstan_test_probe_entry, %function
        .p2align 4
capstan_test_probe_entry:
        mov     x9, sp
        stp     x9, x29, [x0]
        str     x30, [x0, #16]
        b       probe_entry_body
        .size   capstan_test_probe_entry, .-capstan_test_probe_entry
)");

namespace {

std::uint64_t read_fpcr() {
  std::uint64_t v;
  asm volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
void write_fpcr(std::uint64_t v) { asm volatile("msr fpcr, %0" ::"r"(v)); }

// FPCR fields every implementation (and qemu) keeps: AHP (26), DN (25),
// FZ (24), RMode (23:22).
constexpr std::uint64_t kDN = 1u << 25, kFZ = 1u << 24;
constexpr std::uint64_t kRoundUp = 1u << 22, kRoundDown = 2u << 22, kRoundZero = 3u << 22;

// Distinct, recognisable values per context, register and round.
void fill(std::uint64_t* v, std::uint64_t who, std::uint64_t round) {
  for (int r = 0; r < kRegs; ++r) v[r] = (who << 56) | (static_cast<std::uint64_t>(r) << 40) | round;
}

struct Registers {
  void* main_sp = nullptr;
  void* co_sp = nullptr;
  int rounds = 0;
  long co_bad = 0;  // mismatches the coroutine saw in its own registers
};
Registers* regs_g;

[[noreturn]] void registers_entry(void*) {
  Registers& s = *regs_g;
  std::uint64_t in[kRegs], out[kRegs + 2];
  for (std::uint64_t round = 0;; ++round) {
    fill(in, 0xC0, round);
    capstan_test_switch_with(&s.co_sp, s.main_sp, nullptr, in, out);
    if (std::memcmp(in, out, sizeof in) != 0 || out[19] != out[20]) ++s.co_bad;
  }
}

TEST(AArch64Switch, CalleeSavedRegistersSurviveSwitchesBothWays) {
  Registers s;
  regs_g = &s;
  std::vector<char> stack(64 * 1024);
  s.co_sp = capstan_make_context(stack.data(), stack.size(), &registers_entry);
  std::uint64_t in[kRegs], out[kRegs + 2];
  for (std::uint64_t round = 0; round < 2000; ++round) {
    fill(in, 0x3A, round);
    capstan_test_switch_with(&s.main_sp, s.co_sp, nullptr, in, out);
    for (int r = 0; r < kRegs; ++r) {
      ASSERT_EQ(out[r], in[r]) << "register #" << r << " (x19..x28, x29, d8..d15) in round " << round;
    }
    ASSERT_EQ(out[19], out[20]) << "sp moved across the switch";
  }
  EXPECT_EQ(s.co_bad, 0) << "the coroutine's registers were not preserved";
}

// FPCR: the new context starts at 0 (round to nearest, no flush, no default
// NaN) whatever its creator had; afterwards each side keeps its own.
struct Fpcr {
  void* main_sp = nullptr;
  void* co_sp = nullptr;
  std::uint64_t first_seen = ~0ull;
  long co_bad = 0;
};
Fpcr* fpcr_g;

[[noreturn]] void fpcr_entry(void*) {
  Fpcr& s = *fpcr_g;
  s.first_seen = read_fpcr();
  for (std::uint64_t round = 0;; ++round) {
    // Alternate: sometimes the same value as main (the switch skips the
    // msr when the two agree), sometimes a different one.
    std::uint64_t mine = round % 3 == 0 ? (kFZ | kRoundZero) : (kDN | kRoundUp);
    write_fpcr(mine);
    capstan_switch(&s.co_sp, s.main_sp, nullptr);
    if ((read_fpcr() & (kDN | kFZ | kRoundZero)) != mine) ++s.co_bad;
  }
}

TEST(AArch64Switch, FpcrIsPerContextAndStartsAtTheDefault) {
  const std::uint64_t saved = read_fpcr();
  Fpcr s;
  fpcr_g = &s;
  std::vector<char> stack(64 * 1024);
  s.co_sp = capstan_make_context(stack.data(), stack.size(), &fpcr_entry);
  write_fpcr(kFZ | kRoundDown);
  ASSERT_EQ(read_fpcr() & (kFZ | kRoundZero), kFZ | kRoundDown) << "FPCR bits not writable here";
  for (int round = 0; round < 1000; ++round) {
    std::uint64_t mine = round % 2 == 0 ? (kFZ | kRoundZero) : (kDN | kRoundDown);
    write_fpcr(mine);
    capstan_switch(&s.main_sp, s.co_sp, nullptr);
    ASSERT_EQ(read_fpcr() & (kDN | kFZ | kRoundZero), mine) << "round " << round;
  }
  write_fpcr(saved);
  EXPECT_EQ(s.first_seen, 0u) << "a new context inherited its creator's FPCR";
  EXPECT_EQ(s.co_bad, 0) << "the coroutine's FPCR was not preserved";
}

// Entry state of a new context, read before any compiled code runs.
struct Probe {
  std::uint64_t sp_x29_x30[3] = {1, 1, 1};
  void* main_sp = nullptr;
  void* co_sp = nullptr;
};
Probe* probe_g;

}  // namespace

extern "C" void probe_entry_body(void*) {
  for (;;) capstan_switch(&probe_g->co_sp, probe_g->main_sp, nullptr);
}

namespace {

TEST(AArch64Switch, NewContextEntersAlignedAtTheTopWithAnOutermostFrame) {
  // Misaligned bounds on purpose: make_context must round the top down.
  for (std::size_t skew : {0, 1, 8, 15}) {
    Probe p;
    probe_g = &p;
    std::vector<unsigned char> stack(16 * 1024 + 64, 0xA5);
    unsigned char* lo = stack.data() + 16 + skew;
    std::size_t size = 16 * 1024 - skew - 3;  // top = lo + size, not 16-aligned
    auto top = reinterpret_cast<std::uintptr_t>(lo + size);
    p.co_sp = capstan_make_context(lo, size, &capstan_test_probe_entry);
    // Nothing written at or above the top.
    for (unsigned char* q = lo + size; q < stack.data() + stack.size(); ++q) ASSERT_EQ(*q, 0xA5);
    capstan_switch(&p.main_sp, p.co_sp, &p.sp_x29_x30);
    std::uint64_t sp = p.sp_x29_x30[0];
    EXPECT_EQ(sp % 16, 0u) << "skew " << skew;
    EXPECT_LE(sp, top);
    EXPECT_GT(sp + 16, top) << "entry did not start at the top of its stack";
    EXPECT_EQ(p.sp_x29_x30[1], 0u) << "x29 must be 0: the outermost frame record";
    // x30 returns into the trampoline, onto its `brk #0`: an entry that
    // returned would trap there rather than run off into whatever follows.
    ASSERT_NE(p.sp_x29_x30[2], 0u);
    std::uint32_t insn;
    std::memcpy(&insn, reinterpret_cast<const void*>(p.sp_x29_x30[2]), sizeof insn);
    EXPECT_EQ(insn, 0xd4200000u) << "x30 at entry does not point at the trampoline's brk #0";
  }
}

}  // namespace
