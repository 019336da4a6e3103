// idle: the runtime has nothing to run for n seconds (main is blocked on an
// MVar that a plain OS thread fills at the end); measures the CPU it burns.
#include <sys/resource.h>

#include <thread>

#include "bench.hpp"

namespace {
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}
}  // namespace

int main(int argc, char** argv) {
  auto a = bench::parse(argc, argv, 5);
  double percent = 0;
  bool ok = capstan::run(a.opts, [&] {
    capstan::mvar<int> wake;
    std::thread alarm([&] {
      std::this_thread::sleep_for(std::chrono::seconds(a.n));
      while (!wake.try_put(1)) {
      }
    });
    double cpu0 = cpu_seconds();
    std::uint64_t t0 = bench::now_ns();
    int v = wake.take();  // the whole runtime is idle meanwhile
    double wall = static_cast<double>(bench::now_ns() - t0) / 1e9;
    percent = 100.0 * (cpu_seconds() - cpu0) / wall;
    alarm.join();
    return v == 1;
  });
  return bench::report("idle", a.opts.capabilities, a.n, fmt::format("cpu_percent={:.3f}", percent), ok);
}
