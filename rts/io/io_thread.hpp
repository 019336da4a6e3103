// io_thread.hpp - the IO manager's internal structures, shared by its
// files: io_manager.cpp (life cycle, the loop thread, the request queue),
// wake_ups.cpp (completing requests, waking their threads, the parked
// count), timers.cpp (the timer heap), fd_waits.cpp (poll handles, fd
// waits, close and interrupt) and entry_points.cpp (the calls that build
// and push requests).
//
// A green thread that sleeps or waits for an fd allocates a Request, pushes
// its `submit` message to the IO thread and parks on the Request's one-shot
// mvar<int>; the IO thread owns everything else here and wakes the thread
// with mvar::try_put.  The Notes are next to the code they describe:
// io_manager.cpp (Note [One IO thread], [No lost wake-ups], [Requests are
// shared], [Pushing from any thread]), wake_ups.cpp (Note [Wake last],
// [Messages in flight], [Wake-ups in flight]), timers.cpp (Note [Timer
// heap], [Cancelling a timer]), fd_waits.cpp (Note [fd registrations], [Interrupted fds]).
#pragma once

#include <sys/types.h>

#include <uv.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "capstan/mvar.hpp"
#include "io/closer.hpp"
#include "io/io_manager.hpp"
#include "primitives/mpsc_stack.hpp"

namespace capstan::rts::iomgr {

struct Request;
struct FdEntry;

inline constexpr std::size_t kNotInHeap = ~std::size_t{0};

enum class Op : std::uint8_t { sleep, wait_fd, close_fd, close_fd_nowait, interrupt_fd, cancel, timeout };

// How a request ended: the value put into its mvar.
enum Outcome : int {
  kReady = 0,        // the sleep ended / the fd is ready / close_fd closed it
  kTimedOut = 1,     // a wait_fd time-out expired first
  kClosed = 2,       // close_fd closed the fd under the waiter
  kFailed = 3,       // libuv could not poll the fd (Request::err)
  kInterrupted = 4,  // io_interrupt_fd: the fd's owner is closing it
};

// One message to the IO thread: a request's submission or its cancellation.
struct Msg {
  Msg* next = nullptr;  // the queue link; written only by the pusher
  Request* req = nullptr;
  Op op = Op::sleep;
};

struct Request {
  // Written by the pusher before the push, read-only afterwards.
  Msg submit;
  Msg cancel;
  Op kind = Op::sleep;
  bool writable = false;
  bool sticky = false;  // Note [fd registrations]
  int fd = -1;
  std::int64_t deadline = -1;  // steady-clock ns; -1: none
  // Op::timeout: called on the IO thread when the deadline passes (and not
  // at shutdown, nor once cancelled).  Nobody waits on box; the holder of
  // the TimerRef owns the second reference (Note [Cancelling a timer]).
  void (*on_expire)(void* arg, std::uint64_t token) noexcept = nullptr;
  void* arg = nullptr;
  std::uint64_t token = 0;
  // >= 0: a slot of the IoManager's reserve, returned there instead of
  // deleted (Note [Pushing from any thread]).
  int reserve_slot = -1;

  // The IO thread's: never touched by the green thread.
  bool done = false;     // completed or cancelled (Note [No lost wake-ups] 2)
  // Its slot in IoManager::heap_, kNotInHeap if none (Note [Timer heap]);
  // seq: arrival order, breaking ties between equal deadlines.
  std::size_t heap_index = kNotInHeap;
  std::uint64_t seq = 0;
  bool counted = false;  // counted in IoManager::parked_
  Request* prev = nullptr;  // FdEntry waiter list
  Request* next = nullptr;
  FdEntry* entry = nullptr;

  // Written by the IO thread (or, for a lingering close, the closing
  // thread) before the try_put, read by the green thread after its take
  // (ordered by the mvar's lock).
  int err = 0;

  mvar<int> box;  // the one-shot outcome
  // The green thread's wait on box: its waiter and the value it took, kept
  // here rather than in the blocking call's frame, which then holds nothing
  // a call might reach, so that a killed waiter's raise can be a jump that
  // leaves no frame of the call (Note [A killed IO wait leaves no frame] in
  // io/entry_points.cpp).  The green thread's, while it holds its reference.
  detail::waiter wait;
  std::optional<int> taken;
  // Two owners: Note [Requests are shared] (plus one while a wake-up is
  // queued: Note [Wake last]).  acq_rel: the last owner must see every
  // write of the others before deleting.
  std::atomic<int> refs{2};

  void release() noexcept;  // io_manager.cpp
};

// One fd being polled; owned by the IO thread (Note [fd registrations]).
struct FdEntry {
  uv_poll_t handle;
  int fd = -1;
  int events = 0;  // the mask the handle was last started with; 0: stopped
  bool sticky = false;
  // The file the number named when the entry was made: Note [A plain
  // close under a wait].
  bool file_known = false;
  dev_t dev = 0;
  ino_t ino = 0;
  Request* readers = nullptr;
  Request* writers = nullptr;
};

class IoManager {
 public:
  // ensure_started starts the IO thread on first use in a run (green
  // threads only: they cannot race shutdown, which runs after they stopped).
  void ensure_started() {
    // acquire: pairs with start()'s release, making the loop visible.
    if (!started_.load(std::memory_order_acquire)) [[unlikely]] start();
  }

  // push hands a message to the IO thread: Note [No lost wake-ups] 1.
  // From a green thread after ensure_started, or from any thread inside
  // enter_gate/leave_gate (Note [Pushing from any thread]).
  void push(Msg* m) noexcept {
    // seq_cst: deadlock detection reads queued_ and then parked_ (Note
    // [Messages in flight] in wake_ups.cpp).
    queued_.fetch_add(1, std::memory_order_seq_cst);
    if (queue_.push(m)) send_wakeup();
  }

  // send_wakeup is uv_async_send(&async_), out of line and noexcept: libuv
  // declares no exception specification, so inlined into a noexcept
  // caller the call would need a terminate region in every blocking
  // call's frame - an LSDA there, which the unwinder's personality routine
  // parses on every kill (Note [A kill's frames have no cleanups] in
  // mvar/mvar_core.cpp).
  [[gnu::noinline]] void send_wakeup() noexcept { uv_async_send(&async_); }

  // push_quiet is push without the wake-up, for a cancel sent while the
  // runtime shuts down: Note [Quiet cancels at shutdown] (io_manager.cpp).
  // From a green thread only.
  void push_quiet(Msg* m) noexcept {
    queued_.fetch_add(1, std::memory_order_seq_cst);  // as push
    quiet_.push(m);
  }
  // kick_quiet wakes the IO thread if quiet cancels wait (one wake-up for
  // all of them).  From a green thread, before shutdown() (Note [Quiet
  // cancels at shutdown]).
  void kick_quiet() noexcept {
    if (quiet_.maybe_nonempty()) send_wakeup();
  }

  // throttle makes a thread that starts timers wait (yielding its OS
  // thread) while more than kMaxQueued messages are in flight, for at most
  // kMaxThrottleNs: Note [Cancelling a timer], backpressure.
  static constexpr std::size_t kMaxQueued = 16384;
  static constexpr std::int64_t kMaxThrottleNs = 2'000'000;
  void throttle() noexcept {
    if (queued_.load(std::memory_order_relaxed) > kMaxQueued) [[unlikely]] throttle_slow();
  }
  void throttle_slow() noexcept;  // timers.cpp

  // enter_gate admits a push from any thread: false once shutdown has
  // begun, or before start.  A true return must be followed by leave_gate.
  bool enter_gate() noexcept;
  void leave_gate() noexcept;

  // new_fd_request allocates a Request for an any-thread fd message
  // (close_fd_nowait, interrupt_fd) without failing: from the reserve when
  // the heap is exhausted.  Inside the gate only.
  Request* new_fd_request(Op kind, int fd) noexcept;
  void free_reserved(int slot) noexcept;

  std::size_t parked() const { return parked_.load(std::memory_order_seq_cst); }
  std::size_t timers() const { return timers_.load(std::memory_order_relaxed); }
  std::size_t queued() const { return queued_.load(std::memory_order_seq_cst); }
  std::uint64_t drains() const { return drains_.load(std::memory_order_relaxed); }

  void shutdown() noexcept;

  // closes_done: a lingering close handed to closer_ has finished (Note
  // [Closing a lingering socket] in io/closer.hpp).  The closing thread.
  void closes_done() noexcept { parked_.fetch_sub(1, std::memory_order_seq_cst); }

 private:
  void start();
  void thread_main();
  static void on_async(uv_async_t* a);
  static void on_sigquit(uv_signal_t* s, int signum);  // +RTS --dump-on-sigquit
  static void on_prepare(uv_prepare_t* p);            // +RTS -l
  static void on_check(uv_check_t* c);
  void close_trace_handles() noexcept;
  static void on_timer(uv_timer_t* t);
  static void on_poll(uv_poll_t* p, int status, int events);
  static void on_poll_closed(uv_handle_t* h) { delete static_cast<FdEntry*>(h->data); }

  void drain();
  void handle(Msg* m);
  void finish(Request* r, int outcome, bool wake);
  void flush_wakes();
  void finish_and_update(Request* r, int outcome, bool wake) {
    FdEntry* e = r->entry;
    finish(r, outcome, wake);
    if (e) update_poll(e);  // one waiter fewer: maybe a narrower mask
  }
  void count_parked(Request* r);
  // timers.cpp
  void add_timer(Request* r);
  void remove_timer(Request* r);  // r in the heap: O(log n)
  void sift_up(std::size_t i);
  void sift_down(std::size_t i);
  void place(std::size_t i, Request* r) {
    heap_[i] = r;
    r->heap_index = i;
  }
  void expire_timers();
  void rearm_timer();
  void drop_timers();
  // fd_waits.cpp
  void start_wait(Request* r);
  void update_poll(FdEntry* e);
  bool still_same_file(const FdEntry* e) const;
  void drop_stale(FdEntry* e);
  void close_entry(FdEntry* e);
  void do_close(Request* r);
  void do_interrupt(Request* r);
  void drop_fds();
  void stop_everything();

  // The loop's own fds (its epoll fd, the eventfd that wakes it, its
  // signal pipe; -1 where none), marked in owned_fds from a successful
  // start to its shutdown (Note [Owned fds]): life_mu_.
  int own_fds_[4] = {-1, -1, -1, -1};
  // start/shutdown: life_mu_.  started_: written under life_mu_, read by anyone.
  std::mutex life_mu_;
  std::atomic<bool> started_{false};
  std::thread thread_;  // life_mu_
  // stopping_: set by shutdown() before its uv_async_send; read by the IO thread.
  std::atomic<bool> stopping_{false};
  // kGateOpen | pushers in flight: Note [Pushing from any thread].
  static constexpr unsigned kGateOpen = 1u << 31;
  std::atomic<unsigned> gate_{0};

  // Initialised by start() before the IO thread exists (std::thread's
  // constructor orders them before it); then the IO thread's, except that
  // anyone may uv_async_send(&async_).
  uv_loop_t loop_;
  uv_async_t async_;
  uv_timer_t timer_;
  uv_signal_t sigquit_;       // [io thread] +RTS --dump-on-sigquit only
  bool sigquit_ok_ = false;   // [life_mu_ / io thread] sigquit_ is initialised
  // +RTS -l: the loop's waits (trace/trace.hpp).  [io thread]
  uv_prepare_t prepare_;
  uv_check_t check_;
  bool tracing_ok_ = false;   // [life_mu_ / io thread] prepare_ and check_ are initialised
  std::int64_t wait_start_ns_ = 0;
  std::uint64_t idle_before_ = 0;

  // The request queue: any thread pushes, the IO thread takes all.
  MpscStack<Msg, &Msg::next> queue_;
  // Cancels pushed without a wake-up (push_quiet), taken at every drain.
  MpscStack<Msg, &Msg::next> quiet_;
  // [io thread writes] async callbacks so far (io_drains; relaxed: a count).
  std::atomic<std::uint64_t> drains_{0};

  // Requests for any-thread fd messages when new fails.
  static constexpr int kReserve = 32;
  Request reserve_[kReserve];
  std::atomic<bool> reserve_used_[kReserve] = {};

  // Sleeps, timeouts and fd waits the IO thread holds and has not finished,
  // and lingering closes in flight (written by the IO thread, and by the
  // closing thread's closes_done; read by io_parked()).
  std::atomic<std::size_t> parked_{0};
  // Messages pushed and not yet handled: Note [Messages in flight].
  std::atomic<std::size_t> queued_{0};
  // heap_.size(), for io_timers() (written by the IO thread, read by anyone).
  std::atomic<std::size_t> timers_{0};

  // The IO thread's only.
  std::vector<Request*> heap_;  // Note [Timer heap]: a min-heap on (deadline, seq)
  std::uint64_t seq_ = 0;
  std::int64_t armed_for_ = -1;   // deadline timer_ is armed for; -1: stopped
  std::unordered_map<int, FdEntry*> fds_;
  // fds given to io_interrupt_fd and not yet closed: Note [Interrupted fds].
  std::unordered_set<int> interrupted_;
  // Closes that may block for a linger time: Note [Closing a lingering
  // socket] in io/closer.hpp.  The IO thread hands them over; shutdown()
  // stops it.
  Closer closer_;
  // Wake-ups queued by finish(), each holding a reference (Note [Wake last]).
  std::vector<std::pair<Request*, int>> wakes_;
};

extern IoManager& io;  // never destroyed: Note [Exit inside run] in runtime/runtime.cpp

// The test hooks (io_manager.hpp), read with relaxed loads.
int injected_fault(const char* step) noexcept;

}  // namespace capstan::rts::iomgr
