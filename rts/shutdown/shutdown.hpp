// shutdown.hpp - ending a run.  Note [Shutdown] in shutdown/shutdown.cpp.
#pragma once

#include <cstdint>

#include "thread/thread.hpp"

namespace capstan::rts {

// shutdown_protocol runs on the main green thread when main's function has
// returned: kills every other thread, waits for them within the grace
// period, abandons the rest, then sets rt.stop.
void shutdown_protocol();

// request_kill wakes t with thread_killed if it is blocked on an mvar
// (counting it in *killed); returns false if it should be retried later.
// Note [Killing a blocked thread].
bool request_kill(Thread* t, unsigned* killed) noexcept;

// reclaim_leftovers frees the threads left after the schedulers stopped
// (abandoned ones, and main's object) and the Thread slabs; returns how
// many threads were abandoned.
std::uint64_t reclaim_leftovers();

}  // namespace capstan::rts
