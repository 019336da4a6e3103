// buffer.hpp - TraceBuffer: the event buffer of one capability (or of the
// IO manager's thread) for the event trace, +RTS -l.  See Note [Trace
// buffers].
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace capstan::rts {

// One recorded event: 32 bytes, written with plain stores by the buffer's
// owner.  What a, b and c mean depends on the kind (trace/trace.hpp).
struct TraceEvent {
  std::int64_t ts;  // now_ns()
  std::uint32_t kind;
  std::uint32_t a;
  std::uint64_t b;
  std::uint64_t c;
};

struct TraceChunk {
  static constexpr std::uint32_t kEvents = 4096;  // 128 KiB
  TraceChunk* next = nullptr;  // [writer's lists]
  std::uint32_t n = 0;         // [owner] events filled
  TraceEvent ev[kEvents];
};

// Note [Trace buffers]
// ~~~~~~~~~~~~~~~~~~~~
// Each capability records into its own TraceBuffer; only the capability's
// holder writes it (the same ownership as every [owner] field: a hand-over
// of the capability orders one holder's events before the next one's), so
// an event costs plain stores into the current chunk - no lock, no atomic
// read-modify-write.  A full chunk is handed to the background writer by a
// push onto `full_` (a CAS, once per 4096 events) and a fresh one taken
// from `spare_` (a lock, as rarely).  The writer (trace/writer.cpp) takes
// the whole `full_` list with one exchange - acquire, pairing with the
// push's release, so it reads the events the owner wrote - and gives the
// chunks back to `spare_` once written out.  If the writer falls behind by
// kMaxChunks, the owner drops events instead of growing without bound, and
// counts them (`dropped`): the trace then says how many were lost, and
// where, instead of the program running out of memory.  At the end of the
// run, once every capability has stopped, the writer takes each partly
// filled `cur_` chunk too.
class TraceBuffer {
 public:
  static constexpr unsigned kMaxChunks = 512;  // 64 MiB per buffer

  TraceBuffer(unsigned track) : track_(track) {}
  TraceBuffer(const TraceBuffer&) = delete;
  TraceBuffer& operator=(const TraceBuffer&) = delete;
  ~TraceBuffer();

  // emit records one event ([owner]).
  void emit(std::int64_t ts, std::uint32_t kind, std::uint32_t a, std::uint64_t b,
            std::uint64_t c) noexcept {
    TraceChunk* ch = cur_;
    if (!ch || ch->n == TraceChunk::kEvents) [[unlikely]] {
      ch = next_chunk();
      if (!ch) return;  // dropped (counted)
    }
    TraceEvent& e = ch->ev[ch->n];
    e.ts = ts;
    e.kind = kind;
    e.a = a;
    e.b = b;
    e.c = c;
    ch->n = ch->n + 1;
  }

  // take_full returns the full chunks in the order they were filled
  // ([writer]).
  TraceChunk* take_full() noexcept;
  // take_current returns the partly filled chunk ([writer], once the owner
  // has stopped for good).
  TraceChunk* take_current() noexcept {
    TraceChunk* c = cur_;
    cur_ = nullptr;
    return c;
  }
  // give_back returns a written-out chunk for reuse ([writer]).
  void give_back(TraceChunk* c) noexcept;

  unsigned track() const { return track_; }
  std::uint64_t next_flow = 0;      // [owner] wake-up flow ids (trace/trace.hpp)
  std::uint64_t dropped = 0;        // [owner] events lost to a lagging writer, not yet reported
  std::uint64_t dropped_total = 0;  // [owner] all events lost (read by the writer at the end)
  // Spark counters as last recorded ([owner]).
  std::uint64_t sparks_seen[4] = {};

 private:
  TraceChunk* next_chunk() noexcept;

  const unsigned track_;                       // the trace's tid
  TraceChunk* cur_ = nullptr;                  // [owner]
  std::atomic<TraceChunk*> full_{nullptr};     // [atomic] pushed by the owner, taken by the writer
  std::mutex spare_mu_;
  TraceChunk* spare_ = nullptr;                // [lock:spare_mu_]
  unsigned chunks_ = 0;                        // [owner] allocated and not freed
};

}  // namespace capstan::rts
