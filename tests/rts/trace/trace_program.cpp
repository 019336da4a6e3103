// trace_program.cpp - small deterministic programs for trace_test.py, which
// runs them with +RTS -l and checks the trace they leave.
//   trace_program mix       ping-pong, sparks, a safe call, a sleep, a chan,
//                           labelled threads, a killed thread; then prints
//                           the run's statistics as "stat name=value" lines
//   trace_program throw     main throws: run() rethrows, and nobody catches
//   trace_program deadlock  main blocks for ever: blocked_indefinitely, uncaught
#include <unistd.h>

#include <capstan/capstan.hpp>

#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace {

long fib(int n) {
  if (n < 15) return n < 2 ? n : fib(n - 1) + fib(n - 2);
  auto s = capstan::par([n] { return fib(n - 1); });
  long b = fib(n - 2);
  return s.get() + b;
}

void mix() {
  capstan::mvar<int> ping, pong;
  auto a = capstan::fork_io([&] {
    for (int i = 0; i < 200; ++i) ping.put(i), pong.take();
  });
  capstan::label_thread(a, "pinger");
  auto b = capstan::fork_io([&] {
    for (int i = 0; i < 200; ++i) ping.take(), pong.put(i);
  });
  capstan::label_thread(b, "ponger \"quoted\"");
  // Not UTF-8 (a stray byte, a cut sequence) around well-formed UTF-8: the
  // trace must stay valid JSON (json_string in rts/trace/writer.cpp).
  capstan::label_thread(capstan::fork_io([] {}), "bad \xff\xfe \xc3( caf\xc3\xa9 \xe2\x82");
  std::printf("fib %ld\n", fib(24));
  int r = capstan::safe_call([] {
    ::usleep(2000);
    return 7;
  });
  capstan::sleep_for(std::chrono::milliseconds(3));
  capstan::chan<int> ch;
  auto reader = capstan::fork_io([&] {
    int sum = 0;
    for (int i = 0; i < 50; ++i) sum += ch.read();
    std::printf("chan sum %d\n", sum);
  });
  for (int i = 0; i < 50; ++i) {
    ch.write(i);
    if (i % 10 == 0) capstan::yield();
  }
  capstan::mvar<int> never, victim_ran;
  auto victim = capstan::fork_io([&] {
    victim_ran.put(1);
    never.take();
  });
  capstan::label_thread(victim, "victim");
  // Killed only once it has run: a thread killed before its first run has
  // no run span, and the check counts a span for every thread created.
  victim_ran.take();
  capstan::kill_thread(victim);
  capstan::async<void> waiter([&] { capstan::sleep_for(std::chrono::milliseconds(1)); });
  waiter.wait();
  // Wait for the pinger, ponger and reader (they touch ping, pong and ch to
  // the end) and the victim (it unwinds after the kill): this frame dies
  // when mix returns, and run() then shuts down on the same stack.
  for (auto t : {a, b, reader, victim})
    while (capstan::state_of(t) != capstan::thread_state::finished &&
           capstan::state_of(t) != capstan::thread_state::died)
      capstan::yield();
  std::printf("safe call %d\n", r);
  // Let every capability go idle, and sleep, before the end.
  capstan::sleep_for(std::chrono::milliseconds(30));
}

}  // namespace

int main(int argc, char** argv) {
  capstan::options o = capstan::options::parse_or_exit(argc, argv);
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mix") {
    capstan::run(o, mix);
    capstan::runtime_statistics s = capstan::statistics();
    std::uint64_t sleeps = 0;
    for (auto& c : s.capabilities) sleeps += c.sleeps;
    std::printf("stat context_switches=%llu\n", static_cast<unsigned long long>(s.context_switches));
    std::printf("stat sleeps=%llu\n", static_cast<unsigned long long>(sleeps));
    std::printf("stat threads_created=%llu\n", static_cast<unsigned long long>(s.threads_created));
    std::printf("stat sparks_created=%llu\n", static_cast<unsigned long long>(s.sparks.created));
    std::printf("stat sparks_converted=%llu\n", static_cast<unsigned long long>(s.sparks.converted));
    std::printf("stat sparks_fizzled=%llu\n", static_cast<unsigned long long>(s.sparks.fizzled));
    std::printf("stat sparks_overflowed=%llu\n", static_cast<unsigned long long>(s.sparks.overflowed));
    return 0;
  }
  if (mode == "throw") {
    capstan::run(o, [] {
      capstan::fork_io([] { capstan::sleep_for(std::chrono::seconds(10)); });
      capstan::yield();
      throw std::runtime_error("main gives up");
    });
    return 0;
  }
  if (mode == "deadlock") {
    capstan::run(o, [] {
      capstan::mvar<int> never;
      never.take();
    });
    return 0;
  }
  std::fprintf(stderr, "usage: trace_program mix|throw|deadlock [+RTS -l<file> -RTS]\n");
  return 2;
}
