// dump_test.cpp - the thread dump: every live thread is listed once, with
// the state and the wait it is really in; it can be asked for from a
// foreign OS thread; deadlock reports carry the blocked threads' lines.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "capstan_test.hpp"

namespace {

using capstan_test::WithCaps;

class Dump : public WithCaps {};
CAPSTAN_INSTANTIATE_CAPS(Dump);

using capstan_test::dump_to_string;

// line_of returns the dump line of thread `id`, or "" (and fails if there
// is more than one).
std::string line_of(const std::string& dump, capstan::thread_id id) {
  std::istringstream in(dump);
  std::string line, found;
  std::string key = "  thread " + std::to_string(id.value());
  int n = 0;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0 && (line.size() == key.size() || line[key.size()] == ' ' ||
                                    line[key.size()] == ':')) {
      found = line;
      ++n;
    }
  }
  EXPECT_LE(n, 1) << "thread " << id.value() << " listed " << n << " times:\n" << dump;
  return found;
}

bool blocked(capstan::thread_id t) { return capstan::state_of(t) == capstan::thread_state::blocked; }

TEST_P(Dump, NamesEveryThreadAndWhatItWaitsOn) {
  run([&] {
    capstan::mvar<int> empty;
    capstan::chan<int> ch;
    capstan::mutex mu;
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    std::atomic<bool> release_call{false};
    std::atomic<bool> in_call{false};

    auto taker = capstan::fork_io([&] { empty.take(); });
    capstan::label_thread(taker, "taker");
    auto reader = capstan::fork_io([&] { ch.read(); });
    capstan::label_thread(reader, "reader");
    auto sleeper = capstan::fork_io([&] { capstan::sleep_for(std::chrono::seconds(60)); });
    capstan::label_thread(sleeper, "sleeper");
    auto poller = capstan::fork_io([&] { capstan::wait_readable(fds[0]); });
    capstan::label_thread(poller, "poller");
    mu.lock();
    auto locker = capstan::fork_io([&] { std::lock_guard<capstan::mutex> g(mu); });
    capstan::label_thread(locker, "locker");
    auto caller = capstan::fork_io([&] {
      capstan::safe_call([&] {
        in_call = true;
        while (!release_call) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    });
    capstan::label_thread(caller, "caller");

    ASSERT_TRUE(capstan_test::green_wait_until([&] {
      return blocked(taker) && blocked(reader) && blocked(sleeper) && blocked(poller) &&
             blocked(locker) && in_call;
    }));
    std::string dump = dump_to_string();
    SCOPED_TRACE(dump);
    EXPECT_NE(dump.find("capstan: thread dump (dump_threads)"), std::string::npos);
    EXPECT_NE(dump.find(": 7 live green threads"), std::string::npos);

    std::string l = line_of(dump, taker);
    EXPECT_NE(l.find("\"taker\": blocked on mvar take 0x"), std::string::npos) << l;
    EXPECT_NE(l.find("stack "), std::string::npos) << l;
    EXPECT_NE(l.find("last ran "), std::string::npos) << l;
    l = line_of(dump, reader);
    EXPECT_NE(l.find("\"reader\": blocked on chan read 0x"), std::string::npos) << l;
    l = line_of(dump, sleeper);
    EXPECT_NE(l.find("\"sleeper\": blocked on sleep_for, due in "), std::string::npos) << l;
    l = line_of(dump, poller);
    EXPECT_NE(l.find("\"poller\": blocked on fd " + std::to_string(fds[0]) + " to be readable"),
              std::string::npos)
        << l;
    l = line_of(dump, locker);
    EXPECT_NE(l.find("\"locker\": blocked on mutex lock 0x"), std::string::npos) << l;
    l = line_of(dump, caller);
    EXPECT_NE(l.find("\"caller\": in a safe call on task "), std::string::npos) << l;
    l = line_of(dump, capstan::self());
    EXPECT_NE(l.find("(main): running on capability "), std::string::npos) << l;

    release_call = true;
    empty.put(1);
    ch.write(2);
    mu.unlock();
    capstan::kill_thread(sleeper);
    ASSERT_EQ(::write(fds[1], "x", 1), 1);
    for (auto t : {taker, reader, poller, locker, caller})
      ASSERT_TRUE(capstan_test::green_wait_until([&] {
        return capstan::state_of(t) == capstan::thread_state::finished;
      }));
    // Finished threads leave the listing.
    std::string after = dump_to_string();
    EXPECT_EQ(line_of(after, taker), "") << after;
    EXPECT_NE(after.find(": 1 live green thread\n"), std::string::npos) << after;
    ::close(fds[0]);
    ::close(fds[1]);
  });
}

// address_of formats p as the dump does (fmt::ptr: 0x and lowercase hex).
std::string address_of(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// A blocked thread's line names the primitive it waits in by the
// primitive's own address - the one the program has - for every primitive
// (a mutex's and a wait_group's used to show their queue's, 8 bytes in).
TEST_P(Dump, NamesEachPrimitiveByItsOwnAddress) {
  run([&] {
    capstan::mvar<int> mv;
    capstan::chan<int> ch;
    capstan::mutex mu;
    capstan::timed_mutex tm;
    capstan::shared_mutex sm;
    capstan::mutex cv_mu;
    capstan::condition_variable cv;
    capstan::counting_semaphore<> sem(0);
    capstan::latch lat(1);
    capstan::barrier<> bar(2);
    capstan::wait_group wg(1);
    bool cv_go = false;
    mu.lock();
    tm.lock();
    sm.lock();
    struct probe {
      capstan::thread_id id;
      const void* where;
      const char* what;
    };
    std::vector<probe> probes = {
        {capstan::fork_io([&] { mv.take(); }), &mv, "mvar take"},
        {capstan::fork_io([&] { ch.read(); }), &ch, "chan read"},
        {capstan::fork_io([&] { std::lock_guard<capstan::mutex> g(mu); }), &mu, "mutex lock"},
        {capstan::fork_io([&] { std::lock_guard<capstan::timed_mutex> g(tm); }), &tm, "mutex lock"},
        {capstan::fork_io([&] { std::shared_lock<capstan::shared_mutex> g(sm); }), &sm,
         "shared_mutex lock_shared"},
        {capstan::fork_io([&] {
           std::unique_lock<capstan::mutex> g(cv_mu);
           cv.wait(g, [&] { return cv_go; });
         }),
         &cv, "condition_variable wait"},
        {capstan::fork_io([&] { sem.acquire(); }), &sem, "semaphore acquire"},
        {capstan::fork_io([&] { lat.wait(); }), &lat, "latch wait"},
        {capstan::fork_io([&] { bar.arrive_and_wait(); }), &bar, "barrier wait"},
        {capstan::fork_io([&] { wg.wait(); }), &wg, "wait_group wait"},
    };
    ASSERT_TRUE(capstan_test::green_wait_until([&] {
      for (const probe& p : probes)
        if (!blocked(p.id)) return false;
      return true;
    }));
    std::string dump = dump_to_string();
    SCOPED_TRACE(dump);
    for (const probe& p : probes) {
      std::string want = std::string("blocked on ") + p.what + " " + address_of(p.where) + ",";
      EXPECT_NE(line_of(dump, p.id).find(want), std::string::npos) << "wanted: " << want;
    }
    mv.put(1);
    ch.write(2);
    mu.unlock();
    tm.unlock();
    sm.unlock();
    {
      std::lock_guard<capstan::mutex> g(cv_mu);
      cv_go = true;
    }
    cv.notify_all();
    sem.release();
    lat.count_down();
    bar.arrive_and_drop();
    wg.done();
    for (const probe& p : probes)
      ASSERT_TRUE(capstan_test::green_wait_until([&] {
        return capstan::state_of(p.id) == capstan::thread_state::finished;
      }));
  });
}

// A shared_mutex's shared waiter is named for lock_shared, an exclusive
// one for lock (both read "shared_mutex lock" before).
TEST_P(Dump, NamesSharedAndExclusiveWaitsOfASharedMutex) {
  run([&] {
    capstan::shared_mutex sm;
    sm.lock();
    auto reader = capstan::fork_io([&] { std::shared_lock<capstan::shared_mutex> g(sm); });
    auto writer = capstan::fork_io([&] { std::lock_guard<capstan::shared_mutex> g(sm); });
    ASSERT_TRUE(capstan_test::green_wait_until([&] { return blocked(reader) && blocked(writer); }));
    std::string dump = dump_to_string();
    SCOPED_TRACE(dump);
    EXPECT_NE(line_of(dump, reader).find("blocked on shared_mutex lock_shared 0x"), std::string::npos);
    EXPECT_NE(line_of(dump, writer).find("blocked on shared_mutex lock 0x"), std::string::npos);
    sm.unlock();
    for (auto t : {reader, writer})
      ASSERT_TRUE(capstan_test::green_wait_until([&] {
        return capstan::state_of(t) == capstan::thread_state::finished;
      }));
  });
}

TEST_P(Dump, AForeignOsThreadCanAskForOne) {
  run([&] {
    capstan::mvar<int> empty;
    auto taker = capstan::fork_io([&] { empty.take(); });
    capstan::label_thread(taker, "from-afar");
    ASSERT_TRUE(capstan_test::green_wait_until([&] { return blocked(taker); }));
    std::string dump;
    capstan::safe_call([&] {
      std::thread([&] { dump = dump_to_string(); }).join();
    });
    EXPECT_NE(line_of(dump, taker).find("\"from-afar\": blocked on mvar take"), std::string::npos)
        << dump;
    empty.put(1);
  });
}

// With +RTS --dump-on-sigquit, SIGQUIT prints the dump on stderr and the
// program carries on.
TEST_P(Dump, SigquitPrintsItAndTheProgramGoesOn) {
  auto o = capstan_test::opts(caps());
  o.dump_on_sigquit = true;
  capstan_test::StderrFile err;
  capstan::thread_id taker;
  bool seen = false;
  int after = 0;
  run(o, [&] {
    capstan::mvar<int> empty;
    taker = capstan::fork_io([&] { after = empty.take(); });
    capstan::label_thread(taker, "quit-me");
    ASSERT_TRUE(capstan_test::green_wait_until([&] { return blocked(taker); }));
    ::kill(::getpid(), SIGQUIT);
    seen = capstan_test::green_wait_until([&] {
      return err.contents().find("\"quit-me\": blocked on mvar take") != std::string::npos;
    });
    empty.put(7);  // still running: the signal did not end the program
  });
  std::string out = err.restore();
  EXPECT_TRUE(seen) << out;
  EXPECT_NE(out.find("capstan: thread dump (SIGQUIT)"), std::string::npos) << out;
  EXPECT_EQ(after, 7);
}

TEST(DumpOutsideARun, SaysNoRuntimeRunsAndRejectsANullFile) {
  EXPECT_EQ(dump_to_string(), "capstan: thread dump: no runtime is running\n");
  EXPECT_THROW(capstan::dump_threads(nullptr), capstan::usage_error);
}

TEST_P(Dump, ADeadlockReportListsTheBlockedThreads) {
  std::string what;
  capstan::thread_id stuck;
  run([&] {
    capstan::mvar<int> never;
    capstan::chan<int> silent;
    stuck = capstan::fork_io([&] { silent.read(); });
    capstan::label_thread(stuck, "stuck-reader");
    try {
      never.take();
    } catch (const capstan::blocked_indefinitely& e) {
      what = e.what();
    }
  });
  // The first line names no primitive: the waits below are of two kinds.
  EXPECT_EQ(what.rfind("thread blocked indefinitely: deadlock; the blocked threads were:", 0), 0u)
      << what;
  EXPECT_NE(what.find("(main): blocked on mvar take 0x"), std::string::npos) << what;
  EXPECT_NE(what.find("\"stuck-reader\": blocked on chan read 0x"), std::string::npos) << what;
}

}  // namespace
