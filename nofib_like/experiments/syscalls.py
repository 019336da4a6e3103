#!/usr/bin/env python3
"""syscalls.py: one wrk run against a server, with its system calls per
request and its CPU split (a throwaway measurement for docs/io.md, Fewer
system calls per request).

    python3 nofib_like/experiments/syscalls.py [--secs S] [--conns C] [--no-perf] \
        LABEL -- SERVER_CMD... (the word PORT is replaced by a free port)

Starts the server, waits for its "listening on" line, then runs
`wrk -t1 -cC -dS --latency` while `perf stat -e syscalls:sys_enter_*` counts
the server's system calls (all threads, -p PID) and reads the server's
utime/stime from /proc/PID/stat before and after.  Prints one line:

    LABEL req_s=... p99_ms=... reqs=... sc_per_req=... <name>=<per req>...
        srv_user=<cores> srv_sys=<cores> wrk_user=<cores> wrk_sys=<cores>

(cores = CPU seconds / wall seconds of the run; two cores in all here).
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time

CALLS = ["read", "recvfrom", "write", "writev", "sendto", "sendmsg", "epoll_wait",
         "epoll_pwait", "epoll_ctl", "io_uring_enter", "futex", "sched_yield",
         "poll", "ppoll"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime (clock ticks)


def main():
    argv = sys.argv[1:]
    cut = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--no-perf", action="store_true")
    a = ap.parse_args(argv[:cut])
    port = free_port()
    cmd = [str(port) if w == "PORT" else w for w in argv[cut + 1:]]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = srv.stdout.readline()
    if "listening" not in line:
        sys.exit(f"server did not start: {line!r}")
    time.sleep(0.2)
    hz = os.sysconf("SC_CLK_TCK")
    perf = None
    if not a.no_perf:
        events = ",".join(["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in CALLS])
        perf = subprocess.Popen(["perf", "stat", "-x", ",", "-e", events, "-p", str(srv.pid),
                                 "--", "sleep", str(a.secs)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    u0, s0 = cpu_ticks(srv.pid)
    t0 = time.monotonic()
    w = subprocess.run(["/usr/bin/time", "-f", "WRKCPU %U %S", "wrk", "-t1", f"-c{a.conns}",
                        f"-d{a.secs}s", "--latency", "--timeout", "2s",
                        f"http://127.0.0.1:{port}/"], capture_output=True, text=True)
    wall = time.monotonic() - t0
    u1, s1 = cpu_ticks(srv.pid)
    counts = {}
    if perf:
        _, err = perf.communicate()
        for ln in err.splitlines():
            parts = ln.split(",")
            if len(parts) > 3 and parts[0].strip().isdigit():
                name = parts[2]
                key = "all" if name == "raw_syscalls:sys_enter" else name.split("sys_enter_")[-1]
                counts[key] = int(parts[0])
    srv.terminate()
    srv.wait()
    out = w.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    m = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    wu, ws = (float(x) for x in re.search(r"WRKCPU ([\d.]+) ([\d.]+)", w.stderr).groups())
    res = [a.label, f"req_s={rps:.0f}", f"p99_ms={p99:.2f}", f"reqs={reqs}"]
    if counts:
        res.append(f"sc_per_req={counts.get('all', 0) / reqs:.2f}")
        res += [f"{c}={counts[c] / reqs:.2f}" for c in CALLS if counts.get(c, 0) / reqs >= 0.01]
    res += [f"srv_user={(u1 - u0) / hz / wall:.2f}", f"srv_sys={(s1 - s0) / hz / wall:.2f}",
            f"wrk_user={wu / wall:.2f}", f"wrk_sys={ws / wall:.2f}"]
    print(" ".join(res), flush=True)


if __name__ == "__main__":
    main()
