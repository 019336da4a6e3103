// pool.hpp - spark pools and stealing by request: what the scheduler needs
// of sparks (pick and idle poll the pool and look for sparks to run).
// Below the scheduler: nothing here blocks or switches.  See Note [Spark
// pools] in sparks/pool.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "capability/capability.hpp"
#include "capstan/spark.hpp"
#include "thread/threads.hpp"

namespace capstan::rts {

// Pool lifetime, per capability: capacity is rounded up to a power of two.
void spark_pool_init(Capability* cap, std::size_t capacity);
// Frees the pool; sparks still in it are counted GC'd (never run).
void spark_pool_release(Capability* cap) noexcept;

// find_spark returns a spark for `cap` to run - one it stole earlier, the
// oldest of its own pool, else one asked from another capability - already
// marked stolen, or null.  Called by an idle capability and by spark threads.
// With `asked_early` (the idle loop's hunt) it also posts an early request on
// a busy capability's empty pool, and sets *asked_early if it did (Note
// [Asking before the sparks exist]).
detail::spark_base* find_spark(Capability* cap, bool* asked_early = nullptr);

// remove_spark takes a pending spark out of its pool; trim_pool drops the
// holes at the pool's ends (owner only).
void remove_spark(detail::spark_pool* p, detail::spark_base* s);
void trim_pool(detail::spark_pool* p);

// wake_one_sleeper wakes one sleeping capability (the first whose
// spark_wake flag it sets), unless one woken so is still on its way; it
// looks for sparks and stalled capabilities.  spark_wake_sleeper (par()'s,
// through spark_wake_sleeper_for, and the ticker's) does so only while a
// CPU is free (Note [Waking capabilities for sparks]); the watch for
// stalled capabilities calls this directly.
void wake_one_sleeper() noexcept;

// An early request (Note [Asking before the sparks exist], pool.cpp) is
// the thief's Capability* with its low bit set (a Capability is 64-byte
// aligned): it is answered only once the pool holds a spark.
inline Capability* early_request(Capability* thief) {
  return reinterpret_cast<Capability*>(reinterpret_cast<std::uintptr_t>(thief) | 1);
}
inline bool is_early_request(const Capability* r) {
  return (reinterpret_cast<std::uintptr_t>(r) & 1) != 0;
}
// requester: the thief behind a request, early or not.
inline Capability* requester(Capability* r) {
  return reinterpret_cast<Capability*>(reinterpret_cast<std::uintptr_t>(r) & ~std::uintptr_t{1});
}
static_assert(alignof(Capability) >= 2, "early_request tags the low bit of a Capability*");

// Poll point: answer a steal request on cap's pool, if any; an early one
// waits for a spark (the owner's next par() answers it).
inline void poll_spark_requests(Capability* cap) {
  if (Capability* r = cap->sparks.request.load(std::memory_order_relaxed)) [[unlikely]]
    if (!is_early_request(r) || cap->sparks.size() != 0) detail::spark_respond(&cap->sparks);
}

// The body of a spark thread: runs its first spark, then keeps finding
// sparks until there are none (GHC's batching).  Defined with the spark
// thread in sparks/sparks.cpp; here because the scheduler starts spark
// threads (a thread body is the one reference that points up the layers).
extern const detail::closure_ops spark_thread_ops;

// start_spark_thread makes a spark thread on `cap` that runs `first`.
inline void start_spark_thread(Capability* cap, detail::spark_base* first) {
  detail::spark_base* closure = first;
  create_system_thread(cap, &spark_thread_ops, &closure, sizeof closure, /*bound=*/false,
                       /*locked=*/false);
}

// start_wanted_sparks starts a spark thread, now, for each spark of cap's
// backlog whose maker waits for it in get() (Note [A wanted spark does
// not wait behind its thief], sparks/pool.cpp).  Owner only.
void start_wanted_sparks(Capability* cap);

}  // namespace capstan::rts
