// sparks.hpp - spark pools, stealing, and spark threads (the runtime half of
// capstan::par; the inline half is in lib/include/capstan/spark.hpp).
#pragma once

#include <cstddef>

#include "../capability/capability.hpp"
#include "capstan/spark.hpp"

namespace capstan::rts {

struct Task;

// Pool lifetime, per capability: capacity is rounded up to a power of two.
void spark_pool_init(Capability* cap, std::size_t capacity);
// Frees the pool; sparks still in it are counted GC'd (never run).
void spark_pool_release(Capability* cap) noexcept;

// find_spark returns a spark for `cap` to run - the oldest of its own pool,
// else one asked from another capability - already marked stolen, or null.
// Called by an idle capability and by spark threads.
detail::spark_base* find_spark(Capability* cap);

// start_spark_thread makes a spark thread on `cap` that runs `first`, then
// keeps finding sparks until there are none (GHC's batching).
void start_spark_thread(Capability* cap, detail::spark_base* first);

// spark_wake_one wakes one sleeping capability to look for sparks, unless
// one is already on its way.  Note [Waking capabilities for sparks].
void spark_wake_one() noexcept;

// Poll point: answer a steal request on cap's pool, if any.
inline void poll_spark_requests(Capability* cap) {
  if (cap->sparks.request.load(std::memory_order_relaxed)) [[unlikely]]
    detail::spark_respond(&cap->sparks);
}

}  // namespace capstan::rts
