// echo_server.cpp - a TCP echo server: one green thread per connection.
//
//   ./echo_server PORT [+RTS -N2 -RTS]     (PORT 0: any free port)
// Listens on 127.0.0.1, prints "listening on 127.0.0.1:<port>", and echoes
// every byte back until the client closes.  Try: nc 127.0.0.1 PORT
#include <capstan/capstan.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  // Eats +RTS ... -RTS; a bad flag prints the error and the flag summary
  // and exits 1.
  capstan::options opts = capstan::options::parse_or_exit(argc, argv);
  char* end = nullptr;
  long port = argc > 1 ? std::strtol(argv[1], &end, 10) : -1;
  if (argc != 2 || *end != '\0' || port < 0 || port > 65535) {
    std::fprintf(stderr, "usage: echo_server PORT [+RTS flags -RTS]  (PORT: 0..65535, 0 = any)\n");
    return 2;
  }
  capstan::run(opts, [port] {
    auto l = capstan::net::listener::listen("127.0.0.1", static_cast<std::uint16_t>(port));
    fmt::print("listening on 127.0.0.1:{}\n", l.port());
    std::fflush(stdout);
    // accept waits out a lack of fds (a flood past `ulimit -n`) with a
    // back-off and keeps serving: docs/io.md, "Accept back-off".
    for (;;) {
      capstan::fork_io([c = l.accept()]() mutable {
        try {
          char buf[16384];
          while (std::size_t n = c.read(buf, sizeof buf)) c.write_all(buf, n);
        } catch (const std::system_error& e) {  // the client reset the connection
          std::fprintf(stderr, "echo_server: %s\n", e.what());
        }
      });
    }
  });
}
