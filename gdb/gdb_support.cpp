// gdb_support.cpp - what gdb/capstan_gdb.py needs inside the library: the
// DWARF of the runtime's types, and (gdb_script.S) the script itself.
//
// The library is built without debug info in a release build; this one
// file is compiled with -g, so the types the gdb commands read (Runtime,
// ProcessState, Capability, Thread, Task, mvar_core, waiter) are described
// in every libcapstan, at the cost of one small object file's DWARF (see
// docs/debugging.md for the numbers).  Rejected: -g on the whole library
// (several times the size, and line tables nobody asked for in a release),
// and debug=true for the whole build (tests and benchmarks too).
//
// Note [Keeping the gdb support linked]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A static link takes an archive member only if something refers to it.
// runtime/runtime.cpp, which every program using capstan links (it defines
// run_main), refers to capstan_gdb_support_anchor, defined here; this object in
// turn refers to capstan_gdb_script, defined in gdb_script.S next to the
// .debug_gdb_scripts entry, so both come along.  The shared library holds
// every object anyway.
#include "capstan/detail/mvar_core.hpp"
#include "runtime/runtime.hpp"
#include "task/task.hpp"
#include "thread/thread.hpp"

extern "C" [[gnu::visibility("hidden")]] const char capstan_gdb_script[];

namespace capstan::rts {

// Pointers to every type the script reads: enough for the compiler to
// describe them in full.
struct GdbTypes {
  Runtime* runtime;
  ProcessState* process;
  Capability* capability;
  Thread* thread;
  Task* task;
  detail::mvar_core* mvar_core;
  detail::waiter* waiter;
  const char* script;
};

}  // namespace capstan::rts

namespace {
[[gnu::used]] const capstan::rts::GdbTypes gdb_types = {
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, capstan_gdb_script};
}  // namespace

// runtime/runtime.cpp refers to this: see the Note.
extern "C" [[gnu::visibility("hidden")]] const char capstan_gdb_support_anchor;
extern "C" [[gnu::used]] const char capstan_gdb_support_anchor = 0;
