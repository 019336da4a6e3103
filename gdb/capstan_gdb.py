# capstan_gdb.py - gdb commands for capstan's green threads.
#
#   info capstan-threads          every green thread: id, label, state, what it
#                                 is blocked on, capability or Task, stack use
#   capstan-thread ID CMD...      run gdb command CMD (e.g. bt) in green thread
#                                 ID's context; `capstan-thread all bt` does
#                                 every thread
#
# Loaded automatically from the library's .debug_gdb_scripts section (see
# gdb/gdb_support.cpp and docs/debugging.md), or by hand with
# `source .../capstan_gdb.py`.  Nothing here runs code in the inferior: it
# only reads memory and, for capstan-thread, registers.
#
# How it finds the threads
# ~~~~~~~~~~~~~~~~~~~~~~~~
# The run in progress lives in capstan::rts::runtime_slot (a union whose
# member `rt` is the Runtime, runtime/runtime.hpp); capstan::rts::process.running
# says whether a run is in progress.  rt.caps[0 .. rt.n_caps) are the
# Capabilities; each Capability's all_head starts the list of every live
# thread whose home it is, linked by Thread::all_next
# (capability/capability.hpp, thread/thread.hpp).  The list is guarded by
# Capability::all_lock; gdb reads it with the program stopped, so a list
# being edited at that moment may look torn - the walk stops at a cycle or
# after kMaxThreads.
#
# How it switches to a parked context
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A parked thread's context is one saved stack pointer, Thread::sp, pointing
# at the frame capstan_switch pushed (asm/context_frame.h): on x86-64 SysV
# r15 r14 r13 r12 rbx rbp at sp+0x10..0x38 and the return address at 0x40,
# the caller's sp being sp+0x48; on AArch64 x19..x28 at sp+0x40, x29 (fp)
# and x30 (lr, the resume pc) at sp+0x90/0x98, the caller's sp being
# sp+0xb0.  capstan-thread does what Go's and Boost.Context's gdb helpers
# do: it saves the selected OS thread's registers, writes the parked
# thread's callee-saved registers, sp and pc into frame 0 (as if
# capstan_switch had just returned in it), runs the command, and restores
# the registers - also when the command fails.  The ucontext build
# (-Dcontext=ucontext, asm/context_ucontext.cpp) saves a pointer to a Frame
# that starts with the ucontext_t glibc's swapcontext filled; on x86-64 its
# gregs are read instead (told apart by the symbol capstan_trampoline,
# which only the assembly switch defines).
# A green thread that is running (or is between a switch's save and its
# load) is found by its stack: the OS thread whose sp lies inside the green
# thread's stack runs it, and the command runs in that gdb thread instead.
#
# What it depends on (a change to these must update this file)
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#   symbols   capstan::rts::runtime_slot, capstan::rts::process
#   Runtime   caps, tasks (std::vectors: begin and end are their first two
#             words; a std::unique_ptr's pointer is its first word), n_caps,
#             arena.usable_ (the usable size of every stack), coarse_now_ns
#   ProcessState  running
#   Capability    no, current, all_head
#   Task      in_safe_call
#   Thread    id, label (std::string*), state, why, sp, stack_lo, cap, bound,
#             bound_task, is_main, mask, all_next, blocked_on, io_wait, io_arg,
#             wait_tag.op, wait_tag.what, last_ran_ns
#   mvar_core n_waiters_; the values of waiter::what_t and kind_t (copied
#             below, named as thread/dump.cpp names them)
#   the frame layout of asm/context_frame.h (copied below), and for the
#   ucontext build glibc's x86-64 ucontext_t (the offset of its gregs)
# The types come from the DWARF of gdb/gdb_support.cpp, which the library
# is always built with (-g on that one file): the rest of a release build
# has no debug info.

import gdb

kMaxThreads = 1 << 22

# asm/context_frame.h
X64_FRAME = {"r15": 0x10, "r14": 0x18, "r13": 0x20, "r12": 0x28, "rbx": 0x30, "rbp": 0x38}
X64_RIP, X64_FRAME_SIZE = 0x40, 0x48
A64_X19, A64_X29, A64_X30, A64_FRAME_SIZE = 0x40, 0x90, 0x98, 0xb0
# glibc's x86-64 ucontext_t: uc_mcontext.gregs at 40, indexed by REG_*.
UC_GREGS = 40
UC_X64_REGS = {"r12": 4, "r13": 5, "r14": 6, "r15": 7, "rbp": 10, "rbx": 11,
               "rsp": 15, "rip": 16}


class Types:
    """The runtime's types, looked up afresh by every command (cheap, and
    right after the program or its libraries were reloaded)."""

    def __init__(self):
        def look(name):
            try:
                return gdb.lookup_type(name)
            except gdb.error:
                raise gdb.GdbError(
                    "capstan: no debug info for %s.  This program's capstan library "
                    "lacks the type information the gdb commands read (built from "
                    "gdb/gdb_support.cpp with -g); was it stripped (strip --strip-debug "
                    "removes it too), or is the program not linked with capstan?" % name)

        self.runtime = look("capstan::rts::Runtime")
        self.process = look("capstan::rts::ProcessState")
        self.thread = look("capstan::rts::Thread")
        self.cap = look("capstan::rts::Capability")
        self.task = look("capstan::rts::Task")
        self.mvar_core = look("capstan::detail::mvar_core")
        self.void_p = gdb.lookup_type("void").pointer()


def _types():
    return Types()


def _symbol_address(name):
    try:
        return int(gdb.parse_and_eval("(unsigned long)&'%s'" % name))
    except gdb.error:
        raise gdb.GdbError("capstan: no symbol %s: is this program linked with capstan?" % name)


def _atomic(v):
    """The value of a std::atomic<T> (its T is at offset 0 in every library)."""
    t = v.type.strip_typedefs().template_argument(0)
    return v.address.cast(t.pointer()).dereference()


def _enum_name(v):
    return str(v).split("::")[-1]


# detail::waiter::what_t and kind_t (capstan/detail/mvar_core.hpp), named as
# the thread dump names them.
WAIT_WHAT = ["mvar", "chan read", "mutex lock", "shared_mutex lock", "condition_variable wait",
             "semaphore acquire", "latch wait", "barrier wait", "wait_group wait",
             "future get or wait", "throw_to", "runtime event", "spark get"]
WAIT_OP = {0: "take", 1: "read", 2: "put"}


def _start_top(lo, size):
    """Where a thread on the stack at lo started: StackArena::start_size
    (rts/storage/stack.hpp), the stack's colour below its top - the same
    hash, so that the stack use shown here is the thread dump's."""
    h = ((lo >> 12) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    return lo + size - (h >> 60) * 64


def _ms(ns):
    if ns < 0:
        ns = 0
    if ns < 1000000:
        return "%.2f ms" % (ns / 1e6)
    if ns < 10000000000:
        return "%d ms" % (ns // 1000000)
    return "%.1f s" % (ns / 1e9)


def _string(p):
    """The text of a std::string* (null: None)."""
    if int(p) == 0:
        return None
    s = p.dereference()
    try:  # libstdc++
        return s["_M_dataplus"]["_M_p"].string(length=int(s["_M_string_length"]))
    except (gdb.error, RuntimeError):
        return str(s)


class Runtime:
    def __init__(self):
        self.types = _types()
        proc = gdb.Value(_symbol_address("capstan::rts::process")).cast(
            self.types.process.pointer()).dereference()
        if not bool(_atomic(proc["running"])):
            raise gdb.GdbError("capstan: no run in progress (capstan::run has not "
                               "started or has returned)")
        self.rt = gdb.Value(_symbol_address("capstan::rts::runtime_slot")).cast(
            self.types.runtime.pointer()).dereference()
        self.n_caps = int(self.rt["n_caps"])
        begin = self.rt["caps"].address.cast(self.types.cap.pointer().pointer().pointer())
        begin = begin.dereference()
        self.caps = [begin[i] for i in range(self.n_caps)]
        self.stack_size = int(self.rt["arena"]["usable_"])
        # rt.tasks: a std::vector<std::unique_ptr<Task>> (begin and end are
        # its first two words, a unique_ptr's pointer its first word).
        words = self.rt["tasks"].address.cast(self.types.void_p.pointer().pointer())
        begin, end = words[0], words[1]
        self.task_no, self.in_safe_call = {}, {}
        for i in range((int(end) - int(begin)) // self.types.void_p.sizeof):
            task = begin[i].cast(self.types.task.pointer())
            self.task_no[int(task)] = i
            in_call = int(_atomic(task["in_safe_call"]))
            if in_call:
                self.in_safe_call[in_call] = i
        # The ticker's clock (Runtime::coarse_now_ns): "now" as of its last
        # tick, like the thread dump's "last ran"; good to a tick.
        self.now = int(_atomic(self.rt["coarse_now_ns"]))

    def threads(self):
        seen = set()
        for cap in self.caps:
            t = cap["all_head"]
            while int(t) != 0 and int(t) not in seen and len(seen) < kMaxThreads:
                seen.add(int(t))
                yield t
                t = t["all_next"]

    def current_of(self):
        """Thread address -> number of the capability whose current it is."""
        return {int(c["current"]): int(c["no"]) for c in self.caps if int(c["current"]) != 0}


def _os_thread_sps():
    """[(gdb thread, its innermost sp)] for every live OS thread."""
    out = []
    inf = gdb.selected_inferior()
    here = gdb.selected_thread()
    frame = gdb.selected_frame() if here is not None else None
    try:
        for th in inf.threads():
            if not th.is_valid() or th.is_exited() or th.is_running():
                continue
            th.switch()
            try:
                out.append((th, int(gdb.newest_frame().read_register("sp"))))
            except gdb.error:
                pass
    finally:
        if here is not None and here.is_valid():
            here.switch()
            if frame is not None and frame.is_valid():
                frame.select()
    return out


class View:
    """One green thread as gdb sees it."""

    def __init__(self, rt, t, current, os_sps):
        self.t = t
        self.addr = int(t)
        self.id = int(t["id"])
        self.label = _string(t["label"])
        self.state = _enum_name(t["state"])
        self.in_call = rt.in_safe_call.get(self.addr)
        if self.in_call is not None:
            self.state = "in-safe-call"
        self.now = rt.now
        self.core_type = rt.types.mvar_core
        self.task_no = rt.task_no
        last = int(t["last_ran_ns"])
        self.last_ran = _ms(rt.now - last) if last and self.state != "running" else "-"
        self.masked = _enum_name(t["mask"]) != "unmasked"
        self.why = _enum_name(t["why"])
        self.sp = int(t["sp"])
        self.lo = int(t["stack_lo"])
        self.hi = self.lo + rt.stack_size
        self.bound = bool(t["bound"])
        self.is_main = bool(t["is_main"])
        self.cap = int(t["cap"]["no"]) if int(t["cap"]) != 0 else None
        self.current_on = current.get(self.addr)
        # The OS thread executing on this thread's stack, if any (running,
        # or caught between a switch's save and load).
        self.os_thread = None
        self.live_sp = None
        if self.lo:
            for th, sp in os_sps:
                if self.lo <= sp < self.hi:
                    self.os_thread, self.live_sp = th, sp
        self.stack_size = rt.stack_size

    def where(self):
        cap = "cap %d" % self.cap if self.cap is not None else "-"
        if self.in_call is not None:
            return "task %d (safe call)" % self.in_call
        if self.bound:
            task = int(self.t["bound_task"])
            return "%s, task %s" % (cap, self.task_no.get(task, "%#x" % task))
        return cap

    def stack_used(self):
        sp = self.live_sp if self.live_sp is not None else self.sp
        if not self.lo or not sp:
            return "-"
        return "%d/%d" % (_start_top(self.lo, self.stack_size) - sp, self.stack_size)

    def blocked(self):
        """What a blocked thread waits on, in the words of the thread dump
        (thread/dump.cpp, waits_on)."""
        if self.state != "blocked":
            return ""
        t = self.t
        if self.why == "on_mvar" and int(t["wait_tag"]["what"]) == WAIT_WHAT.index("spark get"):
            return "a spark that another capability is running"
        if self.why == "on_shutdown":
            return "shutdown (waiting to be reclaimed)"
        core = int(t["blocked_on"])
        io = _enum_name(t["io_wait"])
        arg = int(t["io_arg"])
        if io == "sleep":
            text = "sleep_for, due in %s" % _ms(arg - self.now)
        elif io == "fd_read":
            text = "fd %d to be readable" % arg
        elif io == "fd_write":
            text = "fd %d to be writable" % arg
        elif io == "close_fd":
            text = "close_fd of fd %d" % arg
        else:
            tag = t["wait_tag"]
            what = int(tag["what"])
            what = WAIT_WHAT[what] if what < len(WAIT_WHAT) else "blocking primitive"
            if what == "mvar":
                what += " " + WAIT_OP.get(int(tag["op"]), "op")
            elif what == "shared_mutex lock" and int(tag["op"]) == 1:  # a shared waiter
                what = "shared_mutex lock_shared"
            text = what
        text += " (mvar_core %#x" % core
        if core:
            try:
                core_v = gdb.Value(core).cast(self.core_type.pointer()).dereference()
                text += ", %d waiting" % int(core_v["n_waiters_"])
            except gdb.error:
                pass
        return text + ")"

    def running_note(self):
        if self.os_thread is None:
            return ""
        return "on gdb thread %d (LWP %d)" % (self.os_thread.num, self.os_thread.ptid[1])


def _views():
    rt = Runtime()
    current = rt.current_of()
    os_sps = _os_thread_sps()
    return rt, [View(rt, t, current, os_sps) for t in rt.threads()]


class InfoCapstanThreads(gdb.Command):
    """List capstan's green threads.

Usage: info capstan-threads
Columns: Id (the thread_id value), Label (label_thread), State (runnable,
running, blocked, finished, in-safe-call), Where (the capability that runs
it next; a bound thread's Task, numbered as in the thread dump), Current
(the capability it is the current thread of), Stack (bytes in use of its
stack reservation), Last ran (how long ago it last stopped running, on the
ticker's clock), and what a blocked thread waits on (as capstan's thread
dump says it, with the address of the mvar_core it is queued on) or the gdb
thread running it.  `capstan-thread ID bt` shows a thread's backtrace."""

    def __init__(self):
        super().__init__("info capstan-threads", gdb.COMMAND_STATUS)

    def invoke(self, arg, from_tty):
        rt, views = _views()
        views.sort(key=lambda v: v.id)
        rows = [("Id", "Label", "State", "Where", "Current", "Stack", "Last ran",
                 "Waits on / runs on")]
        for v in views:
            rows.append((str(v.id), v.label or ("(main)" if v.is_main else "-"), v.state,
                         v.where(), "cap %d" % v.current_on if v.current_on is not None else "-",
                         v.stack_used(), v.last_ran,
                         (v.blocked() or v.running_note()) + (", masked" if v.masked else "")))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for r in rows:
            gdb.write("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] + "\n")
        gdb.write("%d green threads on %d capabilities\n" % (len(views), rt.n_caps))


def _arch():
    name = gdb.selected_inferior().architecture().name()
    if "x86-64" in name:
        return "x86_64"
    if "aarch64" in name:
        return "aarch64"
    raise gdb.GdbError("capstan-thread: no saved-frame layout for architecture %s" % name)


def _is_asm_context():
    try:
        gdb.parse_and_eval("&'capstan_trampoline'")
        return True
    except gdb.error:
        return False


def _saved_registers(sp):
    """The registers of a context parked by capstan_switch at saved sp."""
    inf = gdb.selected_inferior()

    def word(off):
        return int.from_bytes(bytes(inf.read_memory(sp + off, 8)), "little")

    arch = _arch()
    if not _is_asm_context():
        if arch != "x86_64":
            raise gdb.GdbError("capstan-thread: the ucontext build is supported on x86-64 "
                               "only; this is %s" % arch)
        # context_ucontext.cpp: sp points at a Frame starting with the
        # ucontext_t that glibc's swapcontext filled: gregs at offset 40,
        # rsp and rip as capstan_switch's call to swapcontext returns.
        return {r: word(UC_GREGS + 8 * i) for r, i in UC_X64_REGS.items()}
    if arch == "x86_64":
        regs = {r: word(off) for r, off in X64_FRAME.items()}
        regs["rsp"] = sp + X64_FRAME_SIZE
        regs["rip"] = word(X64_RIP)
        return regs
    regs = {"x%d" % (19 + i): word(A64_X19 + 8 * i) for i in range(10)}
    regs["x29"] = word(A64_X29)
    regs["x30"] = word(A64_X30)
    regs["sp"] = sp + A64_FRAME_SIZE
    regs["pc"] = regs["x30"]
    return regs


def _run_in_saved_context(sp, command):
    regs = _saved_registers(sp)
    frame = gdb.selected_frame()
    gdb.newest_frame().select()
    newest = gdb.selected_frame()
    saved = {r: int(newest.read_register(r)) for r in regs}
    # Write sp and pc last: each write flushes gdb's frame cache.
    order = [r for r in regs if r not in ("rsp", "rip", "sp", "pc")]
    order += [r for r in ("rsp", "sp", "rip", "pc") if r in regs]
    # Also put back orig_rax (x86-64 Linux): writing the pc of a thread
    # stopped in a system call may clear it to keep the kernel from
    # restarting the call, which would change what the program sees.
    restore = list(order)
    try:
        saved["orig_rax"] = int(newest.read_register("orig_rax"))
        restore.append("orig_rax")
    except (gdb.error, ValueError):
        pass
    try:
        for r in order:
            try:
                gdb.execute("set $%s = %#x" % (r, regs[r]), to_string=True)
            except gdb.error as e:
                raise gdb.GdbError("capstan-thread: cannot switch to a parked thread here "
                                   "(%s); it writes registers, so it needs a live process, "
                                   "not a core file" % e)
        gdb.execute(command, from_tty=False)
    finally:
        gdb.newest_frame().select()
        for r in restore:
            gdb.execute("set $%s = %#x" % (r, saved[r]), to_string=True)
        try:
            frame.select()
        except gdb.error:
            pass


def _run_in(view, command):
    if view.os_thread is not None:
        gdb.write("capstan: thread %d is running on gdb thread %d (LWP %d)%s; "
                  "`thread %d` selects it. Running `%s` there:\n"
                  % (view.id, view.os_thread.num, view.os_thread.ptid[1],
                     ", the current thread of capability %d" % view.current_on
                     if view.current_on is not None else "",
                     view.os_thread.num, command))
        here = gdb.selected_thread()
        frame = gdb.selected_frame()
        view.os_thread.switch()
        try:
            gdb.execute(command, from_tty=False)
        finally:
            here.switch()
            try:
                frame.select()
            except gdb.error:
                pass
        return
    if view.state == "finished":
        gdb.write("capstan: thread %d has finished\n" % view.id)
        return
    if not view.sp:
        gdb.write("capstan: thread %d has not started running: no context yet\n" % view.id)
        return
    if view.state == "running":
        gdb.write("capstan: thread %d is marked running but no OS thread is on its stack; "
                  "showing its last saved context\n" % view.id)
    _run_in_saved_context(view.sp, command)


class CapstanThread(gdb.Command):
    """Run a gdb command in a capstan green thread's context.

Usage: capstan-thread ID COMMAND
       capstan-thread all COMMAND
ID is the thread's id (as in `info capstan-threads`).  For a parked thread
the command runs with the registers it saved when it switched away (the
selected OS thread's registers are restored afterwards); for a running
thread it runs in the gdb thread executing it.  Example: capstan-thread 2 bt"""

    def __init__(self):
        super().__init__("capstan-thread", gdb.COMMAND_STACK)

    def invoke(self, arg, from_tty):
        parts = arg.split(None, 1)
        if len(parts) < 2:
            raise gdb.GdbError("usage: capstan-thread ID|all COMMAND  (e.g. capstan-thread 2 bt)")
        which, command = parts
        _, views = _views()
        views.sort(key=lambda v: v.id)
        if which == "all":
            for v in views:
                gdb.write("\ncapstan thread %d%s (%s):\n"
                          % (v.id, " \"%s\"" % v.label if v.label else "", v.state))
                _run_in(v, command)
            return
        try:
            wanted = int(which, 0)
        except ValueError:
            raise gdb.GdbError("capstan-thread: %r is not a thread id" % which)
        for v in views:
            if v.id == wanted:
                _run_in(v, command)
                return
        raise gdb.GdbError("capstan-thread: no live thread %d (live: %s)"
                           % (wanted, " ".join(str(v.id) for v in views)))


InfoCapstanThreads()
CapstanThread()
