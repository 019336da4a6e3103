// switch_test.cpp - the bare context switch: arguments, stack alignment,
// callee-saved state and the floating-point control state.
#include <gtest/gtest.h>

#include <cfenv>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "asm/context.hpp"

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace {

// fegetround reads only the x87 control word (glibc on x86-64): the SSE
// unit's rounding mode lives in MXCSR, which the switch saves separately.
int sse_rounding() {
#if defined(__x86_64__)
  return static_cast<int>(_mm_getcsr() & _MM_ROUND_MASK);
#else
  return -1;  // no separate unit: the fegetround checks cover it
#endif
}
#if defined(__x86_64__)
constexpr int kSseUp = _MM_ROUND_UP, kSseDown = _MM_ROUND_DOWN, kSseNearest = _MM_ROUND_NEAREST;
#else
constexpr int kSseUp = -1, kSseDown = -1, kSseNearest = -1;
#endif

struct Pair {
  void* main_sp = nullptr;
  void* co_sp = nullptr;
  std::uintptr_t entry_alignment = 0;
  void* first_arg = nullptr;
  int rounding_seen = -1;
  int sse_rounding_seen = -2;
  int counter = 0;
};

Pair* g;

void entry(void* arg) {
  g->first_arg = arg;
  // The ABI promises a 16-aligned stack at the call site, so at entry
  // (after the return address is pushed) sp % 16 == 8 on x86-64; an aligned
  // local must therefore be 16-aligned.
  alignas(16) volatile char probe[16] = {};
  g->entry_alignment = reinterpret_cast<std::uintptr_t>(&probe[0]) % 16;
  g->rounding_seen = std::fegetround();
  g->sse_rounding_seen = sse_rounding();
  std::fesetround(FE_UPWARD);  // both units; must not leak into the other context
  for (;;) {
    ++g->counter;
    void* back = capstan_switch(&g->co_sp, g->main_sp, reinterpret_cast<void*>(static_cast<std::uintptr_t>(g->counter)));
    (void)back;
    // Our own rounding mode survives the round trip through main.
    if (std::fegetround() != FE_UPWARD || sse_rounding() != kSseUp) std::abort();
  }
}

TEST(ContextSwitch, PassesArgumentAndAlignsTheNewStack) {
  Pair p;
  g = &p;
  std::vector<char> stack(64 * 1024);
  p.co_sp = capstan_make_context(stack.data(), stack.size(), &entry);
  int tag = 0;
  void* r = capstan_switch(&p.main_sp, p.co_sp, &tag);
  EXPECT_EQ(p.first_arg, &tag);
  EXPECT_EQ(p.entry_alignment, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r), 1u);
}

TEST(ContextSwitch, FreshContextsStartWithDefaultRoundingAndKeepTheirOwn) {
  Pair p;
  g = &p;
  std::vector<char> stack(64 * 1024);
  p.co_sp = capstan_make_context(stack.data(), stack.size(), &entry);
  std::fesetround(FE_DOWNWARD);
  capstan_switch(&p.main_sp, p.co_sp, nullptr);
  EXPECT_EQ(p.rounding_seen, FE_TONEAREST) << "a new context inherited the creator's rounding";
  EXPECT_EQ(p.sse_rounding_seen, kSseNearest) << "a new context inherited the creator's MXCSR";
  EXPECT_EQ(std::fegetround(), FE_DOWNWARD) << "the coroutine's FE_UPWARD leaked back";
  EXPECT_EQ(sse_rounding(), kSseDown) << "the coroutine's MXCSR leaked back";
  for (int i = 0; i < 1000; ++i) {
    void* r = capstan_switch(&p.main_sp, p.co_sp, nullptr);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(r), static_cast<std::uintptr_t>(i + 2));
    ASSERT_EQ(std::fegetround(), FE_DOWNWARD);
    ASSERT_EQ(sse_rounding(), kSseDown);
  }
  std::fesetround(FE_TONEAREST);
}

// Values live in callee-saved registers across each round's switch (`hop`,
// given the round's index): the optimiser keeps these loop-carried values
// in registers, so corruption shows up against the same rounds without a
// switch (churn_reference).
template <class Hop>
__attribute__((noinline)) long churn(int rounds, Hop hop) {
  long a = 1, b = 2, c = 3, d = 5, e = 7, f = 11;
  double x = 1.5, y = 2.5, z = 3.5;
  for (int i = 0; i < rounds; ++i) {
    hop(i);
    a += b; b ^= c; c += d; d ^= e; e += f; f ^= a;
    x = x * 1.0000001 + y; y = y * 0.9999999 + z; z = z + x * 1e-9;
  }
  return a + b + c + d + e + f + static_cast<long>(x + y + z);
}

long churn_reference(int rounds) {
  return churn(rounds, [](int) {});
}

// A context that dies leaves through capstan_switch_dead, which saves
// nothing of it: the target must still get all of its own state back -
// callee-saved registers, the rounding mode of both units - and the
// argument, while the dead context's rounding does not follow it.
struct Dying {
  void* main_sp = nullptr;
  void* co_sp = nullptr;
  int round = 0;
};

void dying_entry(void* arg) {
  auto* d = static_cast<Dying*>(arg);
  std::fesetround(d->round % 2 ? FE_UPWARD : FE_TOWARDZERO);  // both units
  capstan_switch_dead(d->main_sp, reinterpret_cast<void*>(static_cast<std::uintptr_t>(d->round)));
}

TEST(ContextSwitch, ADeadContextSavesNothingAndItsTargetGetsAllItsStateBack) {
  Dying d;
  std::vector<char> stack(64 * 1024);
  std::fesetround(FE_DOWNWARD);
  // Each round a fresh context on the same stack sets its own rounding and
  // dies into main, which checks the argument and its own rounding, with
  // loop-carried values in callee-saved registers across every switch.
  long got = churn(1000, [&](int i) {
    d.round = i;
    d.co_sp = capstan_make_context(stack.data(), stack.size(), &dying_entry);
    void* r = capstan_switch(&d.main_sp, d.co_sp, &d);
    if (reinterpret_cast<std::uintptr_t>(r) != static_cast<std::uintptr_t>(i)) std::abort();
    if (std::fegetround() != FE_DOWNWARD || sse_rounding() != kSseDown) std::abort();
  });
  EXPECT_EQ(got, churn_reference(1000));
  std::fesetround(FE_TONEAREST);
}

TEST(ContextSwitch, PreservesCalleeSavedState) {
  Pair p;
  g = &p;
  std::vector<char> stack(64 * 1024);
  p.co_sp = capstan_make_context(stack.data(), stack.size(), &entry);
  EXPECT_EQ(churn(10000, [&](int) { capstan_switch(&p.main_sp, p.co_sp, nullptr); }),
            churn_reference(10000));
  std::fesetround(FE_TONEAREST);
}

}  // namespace
