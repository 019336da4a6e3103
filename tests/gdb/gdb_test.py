#!/usr/bin/env python3
"""gdb_test.py PROGRAM N [LIBDIR] - debug tests/gdb/parked_threads.cpp (built as
PROGRAM) under gdb with +RTS -NN and check what the capstan gdb extension
(gdb/capstan_gdb.py) shows.  The extension must come in by auto-load from
the .debug_gdb_scripts section the library puts in PROGRAM (or, when
PROGRAM links the shared library, in libcapstan.so in LIBDIR).

Checks: `info capstan-threads` lists the parked threads with their labels,
states and what they wait on; `capstan-thread ID bt` of each parked thread
names the function it parked in; `capstan-thread ID bt` of the running
main thread points at the right gdb thread; `capstan-thread all bt` works;
the selected OS thread's registers are the same afterwards (also for one
stopped in a system call: `capstan-thread all` runs from gdb thread 2), and
the program, continued, finishes correctly (so nothing was left corrupted).
Exit 77 (meson: skipped) when gdb is not installed."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

program, n = sys.argv[1], sys.argv[2]
safe = [os.path.dirname(os.path.abspath(program))] + sys.argv[3:4]
gdb = shutil.which("gdb")
if gdb is None:
    print("gdb not installed: skipped (scripts/setup.sh installs it)")
    sys.exit(77)

# The parked functions' backtraces, by label.
PARKED = {"alpha": "parked_in_alpha", "beta": "parked_in_beta",
          "gamma": "parked_in_gamma", "delta": "parked_in_delta"}

commands = r"""
set pagination off
set confirm off
echo ==before-run==\n
python
try:
    gdb.execute("info capstan-threads")
except gdb.error as e:
    gdb.write("error: %s\n" % e)
end
break capstan_test_breakpoint
run
echo ==scripts==\n
info auto-load python-scripts
echo ==info==\n
info capstan-threads
echo ==regs-before==\n
info registers rip rsp rbp rbx r12 r13 r14 r15
python
import re
out = gdb.execute("info capstan-threads", to_string=True)
for line in out.splitlines()[1:-1]:  # the table's rows
    m = re.match(r"\s*(\d+)\s+(\S+)\s", line)
    if m:
        gdb.write("==bt %s==\n" % m.group(2))
        gdb.execute("capstan-thread %s bt" % m.group(1))
end
echo ==regs-after==\n
info registers rip rsp rbp rbx r12 r13 r14 r15
echo ==all==\n
thread 2
capstan-thread all bt
thread 1
echo ==bad-id==\n
python
try:
    gdb.execute("capstan-thread 999999 bt")
except gdb.error as e:
    gdb.write("error: %s\n" % e)
end
echo ==continue==\n
delete
continue
"""

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


with tempfile.NamedTemporaryFile("w", suffix=".gdb", delete=False) as f:
    f.write(commands)
    script = f.name
try:
    proc = subprocess.run(
        [gdb, "-batch", "-nx", "-iex", "add-auto-load-safe-path " + ":".join(safe),
         "-x", script, "--args", program, "+RTS", "-N" + n, "-RTS"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100)
finally:
    os.unlink(script)
out = proc.stdout


def section(name):
    m = re.search(r"^==%s==\n(.*?)(?=^==|\Z)" % re.escape(name), out, re.S | re.M)
    return m.group(1) if m else ""


check(re.search(r"Yes\s+capstan_gdb.py", section("scripts")),
      "the script was auto-loaded from .debug_gdb_scripts: %r" % section("scripts"))
info = section("info")
rows = {}
for line in info.splitlines()[1:-1]:
    cols = line.split()
    if len(cols) >= 6 and cols[0].isdigit():
        rows[cols[1]] = line
check(len(rows) >= 6, "info capstan-threads lists main, alpha..epsilon: %r" % info)
for label in ("alpha", "beta", "gamma", "delta"):
    check(re.search(r"\bblocked\b", rows.get(label, "")), label + " is blocked")
    check(re.search(r"\(mvar_core 0x[0-9a-f]+, 1 waiting\)", rows.get(label, "")),
          label + " shows the mvar_core it waits on")
check("mvar take (" in rows.get("alpha", ""), "alpha waits in an mvar take")
check(re.search(r"sleep_for, due in \d+\.\d s", rows.get("beta", "")), "beta sleeps for an hour")
check("chan read (" in rows.get("gamma", ""), "gamma waits in a chan read")
check("mvar put (" in rows.get("delta", ""), "delta waits in an mvar put")
check(re.search(r"\bcap \d+, task \d+", rows.get("delta", "")),
      "delta (fork_os) shows its capability and Task")
check(re.search(r"\brunnable\b", rows.get("epsilon", "")), "epsilon is runnable")
main_rows = [l for l in info.splitlines() if re.search(r"\brunning\b", l)]
check(len(main_rows) == 1 and main_rows[0].split()[1] == "(main)" and
      "cap 0 " in main_rows[0] and "on gdb thread 1 " in main_rows[0],
      "exactly one running thread (main), current on a capability, on gdb thread 1")
check(re.search(r"\d+ green threads on %s capabilities" % n, info), "summary line")
for label, row in rows.items():
    if label != "epsilon":
        check(re.search(r"\s\d+/\d+\s", row), label + " shows its stack use")

for label, func in PARKED.items():
    bt = section("bt " + label)
    check(re.search(r"#\d+ .*\b%s ?\(" % func, bt), "backtrace of %s names %s" % (label, func))
    check("capstan::rts::thread_entry" in bt, "backtrace of %s reaches the thread's entry" % label)
check("capstan_test_breakpoint" in section("bt (main)"), "bt of the running main thread")
check("is running on gdb thread 1" in section("bt (main)"), "the running thread names its gdb thread")
check("has not started running" in section("bt epsilon"), "epsilon has no context yet")
check(section("regs-before") and section("regs-before") == section("regs-after"),
      "registers restored after capstan-thread")
allbt = section("all")
for func in PARKED.values():
    check(func in allbt, "capstan-thread all bt shows " + func)
check("no live thread 999999" in section("bad-id"), "an unknown id is reported")
check("parked_threads: ok" in section("continue") and "exited normally" in section("continue"),
      "the program, continued, finishes correctly")
check("Python Exception" not in out and "Traceback" not in out, "no Python errors")

if len(sys.argv) == 3:  # static: the script is in PROGRAM, loaded before run
    check("error: capstan: no run in progress" in section("before-run"),
          "before run: says no run is in progress: %r" % section("before-run"))

# Without the DWARF (strip --strip-debug, keeping the script): a clear error.
objcopy = shutil.which("objcopy")
if objcopy and len(sys.argv) == 3:
    with tempfile.TemporaryDirectory() as tmp:
        stripped = os.path.join(tmp, "stripped")
        subprocess.run([objcopy, "--strip-debug", "--keep-section=.debug_gdb_scripts",
                        program, stripped], check=True)
        nodebug = subprocess.run(
            [gdb, "-batch", "-nx", "-iex", "add-auto-load-safe-path " + tmp,
             "-ex", "break capstan_test_breakpoint", "-ex", "run",
             "-ex", "info capstan-threads", stripped],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100).stdout
    check("capstan: no debug info for capstan::rts::" in nodebug and "Traceback" not in nodebug,
          "without the types, a clear error: %r" % nodebug)

if failures:
    print(out)
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print(out)
print("gdb test (-N%s): ok" % n)
