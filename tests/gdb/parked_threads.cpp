// parked_threads.cpp - the program tests/gdb/gdb_test.py debugs with the
// capstan gdb extension (gdb/capstan_gdb.py).
//
// It parks green threads in distinctly named functions, one per kind of
// blocking, then the main thread calls capstan_test_breakpoint(), where gdb
// stops:
//   alpha  blocked in an mvar take      in parked_in_alpha
//   beta   sleeping (a timer)           in parked_in_beta
//   gamma  blocked in a chan read       in parked_in_gamma
//   delta  bound (fork_os), mvar put    in parked_in_delta
//   epsilon runnable, never run yet     (forked just before the breakpoint)
// After the breakpoint it releases them all and checks what they received,
// so the program also runs (and passes) outside gdb.  +RTS -N2 puts some of
// them on the second capability.
#include <capstan/capstan.hpp>
#include <fmt/format.h>

#include <atomic>
#include <chrono>

namespace {

// Keeps the parked functions from being tail calls (atomic: the threads
// may run on different capabilities).
std::atomic<int> g_sink{0};

[[gnu::noinline, gnu::noipa]] int parked_in_alpha(capstan::mvar<int>& box) {
  int v = box.take();
  g_sink += v;
  return v;
}

[[gnu::noinline, gnu::noipa]] void parked_in_beta() {
  try {
    capstan::sleep_for(std::chrono::hours(1));
  } catch (const capstan::thread_killed&) {
    g_sink += 100;
    throw;
  }
}

[[gnu::noinline, gnu::noipa]] int parked_in_gamma(capstan::chan<int>& c) {
  int v = c.read();
  g_sink += v;
  return v;
}

[[gnu::noinline, gnu::noipa]] void parked_in_delta(capstan::mvar<int>& full) {
  full.put(4);  // full already holds a value: blocks until main takes it
  g_sink += 1;
}

}  // namespace

// gdb stops here (break capstan_test_breakpoint).
extern "C" [[gnu::noinline, gnu::noipa, gnu::used]] void capstan_test_breakpoint() {
  asm volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  return capstan::run(argc, argv, [] {
    capstan::mvar<int> alpha_box;
    capstan::chan<int> gamma_chan;
    capstan::mvar<int> delta_box(3);
    capstan::mvar<int> alpha_got, gamma_got, done;

    auto alpha = capstan::fork_io([&] {
      alpha_got.put(parked_in_alpha(alpha_box));
      done.put(1);
    });
    capstan::label_thread(alpha, "alpha");
    auto beta = capstan::fork_io([&] {
      try {
        parked_in_beta();
      } catch (const capstan::thread_killed&) {
      }
      done.put(2);
    });
    capstan::label_thread(beta, "beta");
    auto gamma = capstan::fork_on(capstan::num_capabilities() - 1, [&] {
      gamma_got.put(parked_in_gamma(gamma_chan));
      done.put(3);
    });
    capstan::label_thread(gamma, "gamma");
    auto delta = capstan::fork_os([&] {
      parked_in_delta(delta_box);
      done.put(4);
    });
    capstan::label_thread(delta, "delta");

    // Wait until all four are parked.
    for (auto t : {alpha, beta, gamma, delta}) {
      while (capstan::state_of(t) != capstan::thread_state::blocked) capstan::yield();
    }
    // A thread that has not run yet: forked to this capability's run
    // queue, it stays runnable until main blocks below.
    auto epsilon = capstan::fork_on(capstan::current_capability(), [&] { done.put(5); });
    capstan::label_thread(epsilon, "epsilon");

    capstan_test_breakpoint();

    alpha_box.put(10);
    capstan::kill_thread(beta);
    gamma_chan.write(30);
    int delta_first = delta_box.take();
    int sum = 0;
    for (int i = 0; i < 5; ++i) sum += done.take();
    int a = alpha_got.take(), g = gamma_got.take();
    bool ok = a == 10 && g == 30 && delta_first == 3 && delta_box.take() == 4 && sum == 15;
    fmt::print("parked_threads: {}\n", ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  });
}
