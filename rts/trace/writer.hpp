// writer.hpp - the event trace's writer: starts tracing for a run, turns
// the buffers' records into Chrome trace-event JSON on a background OS
// thread, and completes the file when the run ends.  See Note [The trace
// writer] in trace/writer.cpp.
#pragma once

namespace capstan::rts {

// trace_start makes a buffer per capability (and for the IO thread and the
// shared one), opens the trace file and starts the writer thread, then
// sets rt.tracing; call it after the capabilities exist and before any
// other OS thread starts.  If the file cannot be opened or the thread not
// started, it says so on stderr and the run goes on untraced.
void trace_start();

// trace_stop stops the writer, writes out every record left (each
// buffer's partly filled chunk too) and the end of the file, and frees the
// buffers; call it once every other OS thread of the run has gone.
void trace_stop() noexcept;

}  // namespace capstan::rts
