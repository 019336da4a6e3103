// hello_loops.cpp - a throwaway bound on what batching system calls could give
// the `http` benchmark: the same fixed "Hello, World!" answer to every
// request, on ONE OS thread, three ways.
//
//   g++ -O2 -std=c++20 -o hello_loops hello_loops.cpp -luring
//   ./hello_loops epoll|uring|multishot PORT [SECONDS]
//   wrk -t1 -c64 -d10s http://127.0.0.1:PORT/
//
//   epoll      epoll_wait, then per ready connection one read and one send
//              (what libuv does under capstan's IO manager, minus the
//              green threads: a lower bound on the user-space cost).
//   uring      io_uring: a recv outstanding per connection; each loop
//              iteration queues a send + the next recv per completed recv
//              and submits them all with ONE io_uring_submit_and_wait.
//   multishot  io_uring with one multishot recv per connection reading into
//              a ring of provided buffers (kernel >= 6.0), so only the
//              sends are submitted per request; SINGLE_ISSUER|DEFER_TASKRUN.
//
// It reads request heads only (wrk's GET), answers each complete head found
// (pipelining), prints "listening on 127.0.0.1:<port>" and, at exit, the
// number of responses sent.  Not part of the build: see docs/io.md, Fewer
// system calls per request.  Error handling is minimal by design.
#include <liburing.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kResponse =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 13\r\n"
    "\r\n"
    "Hello, World!";

volatile std::sig_atomic_t g_stop = 0;
unsigned long g_responses = 0;

struct Conn {
  int fd = -1;
  std::string in;   // unparsed request bytes
  std::string out;  // responses being sent (uring modes)
  char buf[4096];
  bool sending = false;
};

// Append one response per complete head in c.in to out; erase them.
void answer(Conn& c, std::string& out) {
  std::size_t start = 0;
  for (;;) {
    std::size_t end = c.in.find("\r\n\r\n", start);
    if (end == std::string::npos) break;
    out.append(kResponse);
    ++g_responses;
    start = end + 4;
  }
  c.in.erase(0, start);
}

int listen_on(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 1024) != 0) {
    perror("bind/listen");
    std::exit(1);
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::printf("listening on 127.0.0.1:%d\n", ntohs(a.sin_port));
  std::fflush(stdout);
  return fd;
}

void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// ---- (a) epoll + read + send ------------------------------------------------
void run_epoll(int lfd) {
  int ep = epoll_create1(0);
  std::vector<Conn*> conns(65536, nullptr);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  epoll_event evs[256];
  std::string out;
  while (!g_stop) {
    int n = epoll_wait(ep, evs, 256, 100);
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        int c = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK);
        if (c < 0) continue;
        nodelay(c);
        conns[c] = new Conn;
        conns[c]->fd = c;
        ev.events = EPOLLIN;
        ev.data.fd = c;
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
        continue;
      }
      Conn& c = *conns[fd];
      ssize_t r = read(fd, c.buf, sizeof c.buf);
      if (r <= 0) {
        if (r < 0 && errno == EAGAIN) continue;
        close(fd);  // also leaves the epoll set
        delete conns[fd];
        conns[fd] = nullptr;
        continue;
      }
      c.in.append(c.buf, static_cast<std::size_t>(r));
      out.clear();
      answer(c, out);
      // wrk's answers are small: one send takes all of them.
      if (!out.empty()) send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    }
  }
}

// ---- (b) io_uring, one submit per iteration ---------------------------------
enum Op : uint64_t { kAccept = 1, kRecv = 2, kSend = 3 };
uint64_t tag(Conn* c, Op op) { return reinterpret_cast<uint64_t>(c) | op; }

io_uring_sqe* sqe_of(io_uring& ring) {
  io_uring_sqe* s = io_uring_get_sqe(&ring);
  if (!s) {
    io_uring_submit(&ring);
    s = io_uring_get_sqe(&ring);
  }
  return s;
}

void queue_accept(io_uring& ring, int lfd, bool multishot) {
  io_uring_sqe* s = sqe_of(ring);
  if (multishot)
    io_uring_prep_multishot_accept(s, lfd, nullptr, nullptr, 0);
  else
    io_uring_prep_accept(s, lfd, nullptr, nullptr, 0);
  io_uring_sqe_set_data64(s, kAccept);
}

void queue_recv(io_uring& ring, Conn* c) {
  io_uring_sqe* s = sqe_of(ring);
  io_uring_prep_recv(s, c->fd, c->buf, sizeof c->buf, 0);
  io_uring_sqe_set_data64(s, tag(c, kRecv));
}

void queue_send(io_uring& ring, Conn* c) {
  io_uring_sqe* s = sqe_of(ring);
  io_uring_prep_send(s, c->fd, c->out.data(), c->out.size(), MSG_NOSIGNAL);
  io_uring_sqe_set_data64(s, tag(c, kSend));
  c->sending = true;
}

constexpr unsigned kBufs = 4096, kBufSize = 2048, kGroup = 7;

void run_uring(int lfd, bool multishot) {
  io_uring ring;
  io_uring_params p{};
  p.flags = multishot ? (IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN) : 0;
  if (int e = io_uring_queue_init_params(4096, &ring, &p); e < 0) {
    std::fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-e));
    std::exit(1);
  }
  io_uring_buf_ring* br = nullptr;
  std::vector<char> pool;
  if (multishot) {
    void* mem = nullptr;
    if (posix_memalign(&mem, 4096, kBufs * sizeof(io_uring_buf)) != 0) std::exit(1);
    br = static_cast<io_uring_buf_ring*>(mem);
    io_uring_buf_ring_init(br);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(br);
    reg.ring_entries = kBufs;
    reg.bgid = kGroup;
    if (int e = io_uring_register_buf_ring(&ring, &reg, 0); e < 0) {
      std::fprintf(stderr, "register_buf_ring: %s\n", strerror(-e));
      std::exit(1);
    }
    pool.resize(std::size_t{kBufs} * kBufSize);
    for (unsigned i = 0; i < kBufs; ++i)
      io_uring_buf_ring_add(br, pool.data() + std::size_t{i} * kBufSize, kBufSize,
                            static_cast<unsigned short>(i), io_uring_buf_ring_mask(kBufs), static_cast<int>(i));
    io_uring_buf_ring_advance(br, kBufs);
  }
  auto queue_mrecv = [&](Conn* c) {
    io_uring_sqe* s = sqe_of(ring);
    io_uring_prep_recv_multishot(s, c->fd, nullptr, 0, 0);
    s->flags |= IOSQE_BUFFER_SELECT;
    s->buf_group = kGroup;
    io_uring_sqe_set_data64(s, tag(c, kRecv));
  };
  queue_accept(ring, lfd, multishot);
  __kernel_timespec ts{0, 100'000'000};
  while (!g_stop) {
    io_uring_cqe* cqe = nullptr;
    io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, nullptr);
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      uint64_t d = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      if (d == kAccept) {
        if (res >= 0) {
          nodelay(res);
          Conn* c = new Conn;
          c->fd = res;
          if (multishot) queue_mrecv(c); else queue_recv(ring, c);
        }
        if (!multishot || !(cqe->flags & IORING_CQE_F_MORE)) queue_accept(ring, lfd, multishot);
        continue;
      }
      Conn* c = reinterpret_cast<Conn*>(d & ~uint64_t{7});
      Op op = static_cast<Op>(d & 7);
      if (op == kSend) {
        c->sending = false;
        // wrk waits for the answer: a short send does not happen here.
        c->out.clear();
        if (c->fd < 0) { delete c; continue; }
        answer(*c, c->out);  // a head that arrived while sending
        if (!c->out.empty()) queue_send(ring, c);
        continue;
      }
      // kRecv
      if (res <= 0) {
        if (multishot && res == -ENOBUFS) { queue_mrecv(c); continue; }
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        if (!c->sending) delete c;
        continue;
      }
      if (multishot) {
        unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
        c->in.append(pool.data() + std::size_t{bid} * kBufSize, static_cast<std::size_t>(res));
        io_uring_buf_ring_add(br, pool.data() + std::size_t{bid} * kBufSize, kBufSize,
                              static_cast<unsigned short>(bid), io_uring_buf_ring_mask(kBufs), 0);
        io_uring_buf_ring_advance(br, 1);
        if (!(cqe->flags & IORING_CQE_F_MORE)) queue_mrecv(c);
      } else {
        c->in.append(c->buf, static_cast<std::size_t>(res));
        queue_recv(ring, c);
      }
      if (!c->sending) {
        answer(*c, c->out);
        if (!c->out.empty()) queue_send(ring, c);
      }
    }
    io_uring_cq_advance(&ring, seen);
  }
  io_uring_queue_exit(&ring);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s epoll|uring|multishot PORT [SECONDS]\n", argv[0]);
    return 2;
  }
  std::string_view mode = argv[1];
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  if (argc > 3) {
    std::signal(SIGALRM, [](int) { g_stop = 1; });
    alarm(static_cast<unsigned>(std::atoi(argv[3])));
  }
  int lfd = listen_on(std::atoi(argv[2]));
  if (mode == "epoll")
    run_epoll(lfd);
  else if (mode == "uring")
    run_uring(lfd, false);
  else if (mode == "multishot")
    run_uring(lfd, true);
  else
    return 2;
  std::fprintf(stderr, "responses=%lu\n", g_responses);
  return 0;
}
