// task.cpp - OS-thread bookkeeping for Tasks.  See task.hpp.
#include "task.hpp"

#include "../capability/capability.hpp"
#include "../sanitizer.hpp"
#include "../sparks/sparks.hpp"

#include <pthread.h>

#include <cerrno>

namespace __cxxabiv1 {
struct __cxa_eh_globals;
extern "C" __cxa_eh_globals* __cxa_get_globals() noexcept;
}  // namespace __cxxabiv1

namespace capstan::rts {

constinit thread_local Task* tl_task_slot = nullptr;

__attribute__((noinline)) Task* my_task() noexcept {
  // The empty asm keeps the compiler from treating this as a pure function
  // whose result could be reused across a switch.
  asm volatile("" ::: "memory");
  return tl_task_slot;
}

__attribute__((noinline)) void set_my_task(Task* t) noexcept {
  tl_task_slot = t;
  if (!t) detail::tl_spark_pool = nullptr;
}

void bind_task_to_this_os_thread(Task* t) {
  set_my_task(t);
  detail::tl_spark_pool = t && t->cap ? &t->cap->sparks : nullptr;
  t->errno_loc = &errno;
  t->eh = reinterpret_cast<EhGlobals*>(__cxxabiv1::__cxa_get_globals());
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo = nullptr;
    std::size_t size = 0;
    pthread_attr_getstack(&attr, &lo, &size);
    t->native_stack_lo = lo;
    t->native_stack_size = size;
    pthread_attr_destroy(&attr);
  }
}

void init_task_sanitizer_state(Task* t) {
  if (san::tsan()) t->tsan_fiber = __tsan_get_current_fiber();
}

}  // namespace capstan::rts
