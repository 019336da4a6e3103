// unmapper.cpp - see unmapper.hpp.
//
// Note [Unmapping after the run]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// At the end of a run every stack slab is unmapped (StackArena::release_all
// from ~Runtime), and the kernel then frees every page a thread touched, one
// after another: for a run that ended with 100,000 threads blocked, one
// page each, about 30 ms - 15-18 % of run()'s exit after those threads have
// been killed and unwound (docs/benchmarks.md, "What a frame costs"), and
// all of it serial, after the capabilities have stopped.  Nothing the run
// made uses those pages any more, so run() does not wait for them: a large
// release (kBackgroundSlabs slabs or more) goes to a thread of its own,
// named capstan-unmap as the runtime's threads are (deadlock detection
// does not take it for an outside thread: Note [Looking for an outside
// thread] in exception/deadlock.cpp).  Small releases - most runs, and the
// unit tests of the arena - unmap at once, as before.
//
// The memory still goes back, a few tens of milliseconds after run()
// returns: the next run() waits for it first (run_main calls wait), so
// runs one after another never hold two runs' stacks, and so does the
// process's exit (a static object's destructor), which would otherwise
// unmap the same pages itself.  A fork() while the thread runs leaves the
// child without it: the child forgets it (pthread_atfork) and keeps those
// mappings, which its parent is giving back.
//
// Rejected: giving pages back while threads finish at shutdown (the
// arena's keep_memory is off): the system calls and TLB shoot-downs came
// back into the kill phase, -N1 slower ("What a frame costs"); two threads
// each freeing half of the pages: the kernel frees them mostly one after
// another, half the tail at best.
#include "storage/unmapper.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <mutex>
#include <new>

namespace capstan::rts::unmapper {
namespace {

struct Unmapper {
  std::mutex mu;
  pthread_t thread{};
  bool running = false;  // [mu] thread was started and is not yet joined
  Mappings maps;         // [mu] the running thread's; only it reads them meanwhile

  ~Unmapper() {  // the process's exit: Note [Unmapping after the run]
    std::lock_guard<std::mutex> g(mu);
    join_locked();
  }
  void join_locked() noexcept {
    if (!running) return;
    pthread_join(thread, nullptr);
    running = false;
    maps.clear();
  }
};

Unmapper the_unmapper;

// A fork()ed child has no unmapping thread, and a copy of mu that another
// thread may have held: it starts afresh and keeps those mappings.
void forget_in_child() {
  new (&the_unmapper.mu) std::mutex();
  the_unmapper.running = false;
  new (&the_unmapper.maps) Mappings();  // the parent's buffer: left to the child's heap
}

[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, &forget_in_child);

void unmap_now(const Mappings& maps) noexcept {
  for (const auto& [p, n] : maps) munmap(p, n);
}

void* thread_main(void* arg) {
  pthread_setname_np(pthread_self(), "capstan-unmap");  // Note [Unmapping after the run]
  unmap_now(*static_cast<Mappings*>(arg));
  return nullptr;
}

}  // namespace

void unmap(Mappings maps) noexcept {
  if (maps.size() < kBackgroundSlabs) {
    unmap_now(maps);
    return;
  }
  std::lock_guard<std::mutex> g(the_unmapper.mu);
  the_unmapper.join_locked();  // one release at a time
  the_unmapper.maps = std::move(maps);
  if (pthread_create(&the_unmapper.thread, nullptr, &thread_main, &the_unmapper.maps) != 0) {
    unmap_now(the_unmapper.maps);  // no thread to be had: the caller waits, as before
    the_unmapper.maps.clear();
    return;
  }
  the_unmapper.running = true;
}

void wait() noexcept {
  std::lock_guard<std::mutex> g(the_unmapper.mu);
  the_unmapper.join_locked();
}

}  // namespace capstan::rts::unmapper
