// sanitizer.hpp - fiber annotations for AddressSanitizer and ThreadSanitizer.
//
// The hooks are weak symbols: when the process runs with a sanitizer runtime
// (capstan itself built with -Db_sanitize=..., or only the user's program),
// they resolve and every switch is annotated; otherwise they are null and
// the cost is one predictable branch per switch.
//
// ASan: __sanitizer_start_switch_fiber(&save, dst_lo, dst_size) right before
// the switch, __sanitizer_finish_switch_fiber(save, ...) first thing after
// landing; a thread leaving for good passes a null save so its fake stack is
// freed.  A stack handed to a new thread is unpoisoned whole first
// (prepare_stack): its last user may have been abandoned mid-call at a
// shutdown, or its slab mapped where an earlier run's slab was, and ASan
// keeps the shadow of memory that was unmapped - stale redzones that the
// new thread's frames would hit (seen as a stack-buffer-overflow in an
// mvar take, after tests that abandon threads).
// TSan: a fiber per green thread, __tsan_switch_to_fiber(f, 0) immediately
// before the switch (flag 0 = synchronise: our switches do
// transfer happens-before), __tsan_destroy_fiber once the thread is dead
// and switched away from.
#pragma once

#include <cstddef>

extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, std::size_t size)
    __attribute__((weak));
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                     std::size_t* size_old) __attribute__((weak));
void __asan_unpoison_memory_region(void const volatile* addr, std::size_t size)
    __attribute__((weak));
void __asan_handle_no_return() __attribute__((weak));
void* __tsan_get_current_fiber() __attribute__((weak));
void* __tsan_create_fiber(unsigned flags) __attribute__((weak));
void __tsan_destroy_fiber(void* fiber) __attribute__((weak));
void __tsan_switch_to_fiber(void* fiber, unsigned flags) __attribute__((weak));
}

namespace capstan::rts::san {

inline bool asan() { return &__sanitizer_start_switch_fiber != nullptr; }
inline bool tsan() { return &__tsan_switch_to_fiber != nullptr; }

}  // namespace capstan::rts::san
