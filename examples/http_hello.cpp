// http_hello.cpp - a minimal HTTP/1.1 keep-alive server answering every
// request with "Hello, World!": one green thread per connection.
//
//   ./http_hello PORT [SECONDS] [+RTS -N2 -RTS]   (PORT 0: any free port)
// With SECONDS it stops after that long and returns from main (so that a
// +RTS -l trace or +RTS -s statistics are written).
// Listens on 127.0.0.1 and prints "listening on 127.0.0.1:<port>".  Try:
//   curl http://127.0.0.1:PORT/      wrk -c 64 -d 10s http://127.0.0.1:PORT/
// It reads request heads (no bodies: GET-style requests), answers pipelined
// requests in one write, and closes after "Connection: close" or HTTP/1.0
// without keep-alive.  It is the server the nofib_like `http` benchmark
// drives (nofib_like/http.py).
#include <capstan/capstan.hpp>
#include <fmt/format.h>

#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 13\r\n"
    "\r\n"
    "Hello, World!";
constexpr std::string_view kTooLarge =
    "HTTP/1.1 431 Request Header Fields Too Large\r\n"
    "Content-Length: 0\r\n"
    "Connection: close\r\n"
    "\r\n";

// has_token: does the head contain a header line "Name: ...token..."
// (case-insensitive; good enough for Connection: close / keep-alive)?
bool header_has(std::string_view head, std::string_view name, std::string_view token) {
  for (std::size_t pos = head.find("\r\n"); pos != std::string_view::npos;) {
    std::size_t eol = head.find("\r\n", pos + 2);
    std::string_view line = head.substr(pos + 2, eol == std::string_view::npos
                                                     ? std::string_view::npos
                                                     : eol - pos - 2);
    if (line.size() > name.size() && line[name.size()] == ':' &&
        strncasecmp(line.data(), name.data(), name.size()) == 0) {
      std::string value(line.substr(name.size() + 1));
      for (char& ch : value) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (value.find(token) != std::string::npos) return true;
    }
    pos = eol;
  }
  return false;
}

void serve(capstan::net::connection c) {
  std::string in;
  std::string out;
  char buf[8192];
  for (;;) {
    std::size_t n = c.read(buf, sizeof buf);
    if (n == 0) return;  // the client closed
    in.append(buf, n);
    bool close_after = false;
    std::size_t start = 0;
    for (;;) {  // every complete request head in the buffer (pipelining)
      std::size_t end = in.find("\r\n\r\n", start);
      if (end == std::string::npos) break;
      std::string_view head(in.data() + start, end + 2 - start);
      bool http10 = head.find("HTTP/1.0\r\n") != std::string_view::npos;
      if (header_has(head, "connection", "close") ||
          (http10 && !header_has(head, "connection", "keep-alive")))
        close_after = true;
      out.append(kResponse);
      start = end + 4;
      if (close_after) break;
    }
    in.erase(0, start);
    if (in.size() > 64 * 1024) {  // a head that never ends
      c.write_all(kTooLarge.data(), kTooLarge.size());
      return;
    }
    if (!out.empty()) {
      c.write_all(out.data(), out.size());
      out.clear();
    }
    if (close_after) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Eats +RTS ... -RTS; a bad flag prints the error and the flag summary
  // and exits 1.
  capstan::options opts = capstan::options::parse_or_exit(argc, argv);
  char* end = nullptr;
  long port = argc > 1 ? std::strtol(argv[1], &end, 10) : -1;
  bool port_ok = argc > 1 && *end == '\0' && port >= 0 && port <= 65535;
  double seconds = 0;
  if (argc == 3) {
    seconds = std::strtod(argv[2], &end);
    if (*end != '\0' || !(seconds > 0)) port_ok = false;
  }
  if (argc < 2 || argc > 3 || !port_ok) {
    std::fprintf(stderr,
                 "usage: http_hello PORT [SECONDS] [+RTS flags -RTS]  (PORT: 0..65535, 0 = any; "
                 "SECONDS > 0: stop after that long)\n");
    return 2;
  }
  capstan::run(opts, [port, seconds] {
    auto l = capstan::net::listener::listen("127.0.0.1", static_cast<std::uint16_t>(port));
    fmt::print("listening on 127.0.0.1:{}\n", l.port());
    std::fflush(stdout);
    auto serve_all = [&l] {
      // accept waits out a lack of fds (a flood past `ulimit -n`) with a
      // back-off and keeps serving: docs/io.md, "Accept back-off".
      for (;;) {
        capstan::fork_io([c = l.accept()]() mutable {
          try {
            serve(std::move(c));
          } catch (const std::system_error&) {
            // A reset connection ends only its own thread.
          }
        });
      }
    };
    if (seconds > 0) capstan::timeout(std::chrono::duration<double>(seconds), serve_all);
    else serve_all();
  });
}
