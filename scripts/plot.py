#!/usr/bin/env python3
"""Draw capstan's pictures with matplotlib (Debian's python3-matplotlib).

    python3 scripts/plot.py trace TRACE.json -o OUT.png [--from-ms A --to-ms B]
    python3 scripts/plot.py table RESULTS.json -o OUT.png

`trace` renders an event trace written under `+RTS -l` (the schema is in
docs/trace.md) the way ThreadScope's activity view does: on top the number
of capabilities running a green thread over time; below it one row per
capability (green: running a green thread, pale: idle, spinning for work,
grey: sleeping in the OS, white: nothing recorded), the capability's
cumulative spark counters under its row, and the task (safe call, in-call)
and IO manager tracks when the trace has them.  A row with more spans in
the window than --max-spans is drawn binned (the fraction of each bin spent
running, idle and sleeping) rather than span by span, so a trace of
hundreds of thousands of spans renders in seconds.

`table` draws the nofib_like table (the JSON nofib_like/run.py writes next
to its markdown table with --json): for each row, capstan's median against
its GHC twin's at -N1 and -N2 on a log scale, min..max as whiskers, and the
ratio as "12.3x faster" (or "slower"; "better"/"worse" for metrics that are
not times or rates), honouring the metrics where higher is better.

A file that is not what the command expects gives a one-line error and
exit status 2; exit status 3 means matplotlib is missing.  Debian's matplotlib lives in /usr/lib/python3; when this
script is run by another python3 (e.g. a pyenv one) that lacks matplotlib,
it re-runs itself under /usr/bin/python3.
"""

import argparse
import json
import math
import os
import sys
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
NO_MATPLOTLIB = 3   # exit status when no python3 here has matplotlib


class BadInput(Exception):
    """The input file is not what the command expects (a one-line message)."""


def import_matplotlib():
    """Import matplotlib (Agg backend), pyplot and numpy, re-running this
    script under the system python if this interpreter lacks them; exit 3
    with advice if neither has them."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    me = os.path.realpath(sys.executable) if sys.executable else ""
    if (os.path.exists(SYSTEM_PYTHON) and me != os.path.realpath(SYSTEM_PYTHON)
            and not os.environ.get("CAPSTAN_PLOT_REEXEC")):
        os.environ["CAPSTAN_PLOT_REEXEC"] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    print("plot.py: matplotlib is not installed (scripts/setup.sh installs "
          "python3-matplotlib; or: apt-get install python3-matplotlib)", file=sys.stderr)
    sys.exit(NO_MATPLOTLIB)


# ---------------------------------------------------------------- trace

RUN_COLOUR = "#2e9e44"       # ThreadScope's green
RUN_EDGE = "#1d6b2d"
IDLE_COLOUR = "#f2dc9b"      # spinning, looking for work
SLEEP_COLOUR = "#c8c8c8"     # parked in the OS
SAFE_CALL_COLOUR = "#8e63b5"
IN_CALL_COLOUR = "#3f7fc0"
IO_COLOUR = "#2a9d9d"
WAKE_COLOUR = "#d0452f"
SPARK_COLOURS = {"created": "#1f5fa8", "converted": "#2e9e44",
                 "fizzled": "#d0452f", "overflowed": "#9a6a00"}
IO_TID = 999
TASK_TID0 = 1000


class Trace:
    """The parts of a trace the picture needs, per track, times in ms."""

    def __init__(self):
        self.program = ""
        self.caps_declared = None
        self.names = {}      # tid -> track name
        self.spans = {}      # tid -> {kind: [(start, end, label)]}
        self.counters = {}   # tid -> [(ts, {counter: value})]
        self.instants = {}   # tid -> {kind: [ts]}
        self.flows = []      # (tid from, ts from, tid to, ts to)
        self.skipped = 0     # malformed events ignored


def read_json(path, what):
    """Parse the JSON file at path; raise BadInput saying it is not `what`."""
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror}")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadInput(f"{path} is not {what}: not JSON ({e})")


def load_trace(path):
    """Read a trace file into a Trace; raise BadInput if it is not one."""
    data = read_json(path, "a trace")
    if isinstance(data, list):   # the trace-event format also allows a bare array
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise BadInput(f"{path} is not a trace: no \"traceEvents\" list")
    tr = Trace()
    other = data.get("otherData") if isinstance(data.get("otherData"), dict) else {}
    tr.program = str(other.get("program") or Path(path).stem)
    if isinstance(other.get("capabilities"), int):
        tr.caps_declared = other["capabilities"]
    starts = {}
    ends = []
    for e in data["traceEvents"]:
        try:
            ph = e["ph"]
            if ph == "M":
                if e.get("name") == "thread_name":
                    tr.names[int(e["tid"])] = str(e["args"]["name"])
                continue
            tid = int(e["tid"])
            ts = float(e["ts"]) / 1000.0
            if ph == "X":
                end = ts + float(e["dur"]) / 1000.0
                cat, name = e.get("cat", ""), e.get("name", "")
                if cat == "thread":
                    args = e.get("args") or {}
                    kind, label = "run", str(args.get("thread", name))
                    if args.get("label"):
                        label += " " + str(args["label"])
                elif cat == "idle":
                    kind, label = ("sleeping" if name == "sleeping" else "idle"), ""
                elif cat == "foreign":
                    kind = name if name in ("safe_call", "in_call") else "foreign"
                    label = str((e.get("args") or {}).get("thread", ""))
                elif cat == "io":
                    kind, label = "io", ""
                else:
                    kind, label = "other", name
                tr.spans.setdefault(tid, {}).setdefault(kind, []).append((ts, end, label))
            elif ph == "C":
                vals = {k: float(v) for k, v in (e.get("args") or {}).items()}
                tr.counters.setdefault(tid, []).append((ts, vals))
            elif ph == "i" or ph == "I":
                kind = str(e.get("name", "")).replace("spark ", "")
                tr.instants.setdefault(tid, {}).setdefault(kind, []).append(ts)
            elif ph == "s":
                starts[e["id"]] = (tid, ts)
            elif ph == "f":
                ends.append((e["id"], tid, ts))
            else:
                tr.skipped += 1
        except (KeyError, TypeError, ValueError, AttributeError):
            tr.skipped += 1
    for fid, tid, ts in ends:
        if fid in starts:
            tr.flows.append((*starts[fid], tid, ts))
    if not tr.spans and not tr.counters and not tr.instants:
        if tr.names:
            raise BadInput(f"{path} has nothing to draw: only track names, "
                           "no spans, counters or markers")
        raise BadInput(f"{path} is not a capstan trace: no spans, counters or markers")
    return tr


def trace_extent(tr):
    lo, hi = math.inf, -math.inf
    for kinds in tr.spans.values():
        for spans in kinds.values():
            for s, e, _ in spans:
                lo, hi = min(lo, s), max(hi, e)
    for pts in tr.counters.values():
        for ts, _ in pts:
            lo, hi = min(lo, ts), max(hi, ts)
    for kinds in tr.instants.values():
        for pts in kinds.values():
            lo, hi = min(lo, min(pts)), max(hi, max(pts))
    if hi <= lo:
        hi = lo + 1e-3
    return lo, hi


def span_arrays(spans, lo, hi):
    """Starts and ends (numpy) of the spans overlapping [lo, hi], clipped."""
    import numpy as np
    if not spans:
        return np.empty(0), np.empty(0)
    a = np.array([(s, e) for s, e, _ in spans], dtype=float)
    keep = (a[:, 1] >= lo) & (a[:, 0] <= hi)
    a = a[keep]
    return np.clip(a[:, 0], lo, hi), np.clip(a[:, 1], lo, hi)


def busy_per_bin(starts, ends, edges):
    """For bins between consecutive edges, the time covered by the spans in
    each, exactly: with F(t) = sum of clip(t - s_i, 0, d_i) the covered time
    up to t, F(t) = sum over s_i < t of (t - s_i) minus the same over ends,
    which sorted starts/ends and cumulative sums give in O((n + bins) log n)."""
    import numpy as np

    def ramp(points):
        p = np.sort(points)
        c = np.concatenate([[0.0], np.cumsum(p)])
        k = np.searchsorted(p, edges, side="right")
        return k * edges - c[k]
    covered = ramp(starts) - ramp(ends)
    return np.diff(covered)


def cap_tids(tr):
    """The capability tracks, in order: tids below the IO manager's."""
    tids = {t for t in tr.spans if t < IO_TID} | {t for t in tr.counters if t < IO_TID}
    tids |= {t for t in tr.instants if t < IO_TID}
    tids |= {t for t, n in tr.names.items() if t < IO_TID and n.startswith("capability")}
    return sorted(tids)


def draw_spans(ax, spans, y, h, colour, lo, hi, min_w, edge=None, labels=False,
               label_width=None, label_prefix=""):
    """Spans as one broken_barh (one collection, not a patch per span);
    spans narrower than min_w are widened to it so they stay visible."""
    import numpy as np
    s, e = span_arrays(spans, lo, hi)
    if len(s) == 0:
        return
    w = np.maximum(e - s, min_w)
    ax.broken_barh(np.column_stack([s, w]), (y, h), facecolors=colour,
                   edgecolors=edge or "none", linewidth=0.4 if edge else 0)
    if labels:
        shown = 0
        for st, en, label in spans:
            if en < lo or st > hi or not label:
                continue
            a, b = max(st, lo), min(en, hi)
            if b - a >= label_width * len(label_prefix + label) and shown < 200:
                ax.text((a + b) / 2, y + h / 2, label_prefix + label, ha="center", va="center",
                        fontsize=6.5, color="white", clip_on=True)
                shown += 1


def draw_binned(ax, kinds, y, h, lo, hi, bins):
    """A dense capability row: per bin, the fraction of time running (green,
    from the bottom), idle (pale) and sleeping (grey), stacked."""
    import numpy as np
    edges = np.linspace(lo, hi, bins + 1)
    width = edges[1] - edges[0]
    fracs = []
    for kind in ("run", "idle", "sleeping"):
        s, e = span_arrays(kinds.get(kind, []), lo, hi)
        fracs.append(np.clip(busy_per_bin(s, e, edges) / width, 0, 1))
    base = np.zeros(bins)
    x = np.repeat(edges, 2)[1:-1]
    for frac, colour in zip(fracs, (RUN_COLOUR, IDLE_COLOUR, SLEEP_COLOUR)):
        top = np.minimum(base + frac, 1.0)
        ax.fill_between(x, y + h * np.repeat(base, 2), y + h * np.repeat(top, 2),
                        color=colour, linewidth=0)
        base = top


def render_trace(tr, out, lo=None, hi=None, max_spans=20000, bins=None):
    import numpy as np
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D

    t0, t1 = trace_extent(tr)
    lo = t0 if lo is None else lo
    hi = t1 if hi is None else hi
    if hi <= lo:
        raise BadInput(f"empty time window: {lo:g} ms .. {hi:g} ms")
    caps = cap_tids(tr)
    tasks = sorted(t for t in tr.spans if t >= TASK_TID0)
    shown_tasks = tasks[:16]
    has_io = IO_TID in tr.spans
    spark_caps = [c for c in caps if tr.counters.get(c) or tr.instants.get(c)]
    width_in = 14.0
    px = int(width_in * 100 * 0.85)          # plot-area pixels, about
    bins = bins or min(px, 1000)
    min_w = (hi - lo) / px
    label_width = (hi - lo) / px * 5.5   # ms per character of a span label

    # Rows: activity, then per capability its row and its sparks, then tasks/io.
    rows = [("activity", 1.6)]
    for c in caps:
        rows.append((("cap", c), 0.75))
        if c in spark_caps:
            rows.append((("sparks", c), 0.7))
    extra = len(shown_tasks) + (1 if has_io else 0)
    if extra:
        rows.append(("extra", 0.35 + 0.3 * extra))
    heights = [h for _, h in rows]
    fig_h = sum(heights) + 1.7
    fig, axes = plt.subplots(len(rows), 1, sharex=True, figsize=(width_in, fig_h),
                             gridspec_kw=dict(height_ratios=heights, hspace=0.12))
    axes = np.atleast_1d(axes)
    ax_of = {key: ax for (key, _), ax in zip(rows, axes)}
    fig.subplots_adjust(left=0.07, right=0.99, top=1 - 0.45 / fig_h, bottom=0.8 / fig_h)
    ncaps = max(len(caps), tr.caps_declared or 0, 1)
    title = tr.program
    if tr.caps_declared or caps:
        title += f"  -N{tr.caps_declared or len(caps)}"
    if (lo, hi) != (t0, t1):
        title += f"   ({lo:.3f} ms .. {hi:.3f} ms)"
    fig.suptitle(title, fontsize=13, fontweight="bold", x=0.07, ha="left", y=0.995)

    # Activity: capabilities running a green thread, averaged per bin.
    ax = ax_of["activity"]
    act_bins = min(bins, 400)
    edges = np.linspace(lo, hi, act_bins + 1)
    total = np.zeros(act_bins)
    for c in caps:
        s, e = span_arrays(tr.spans.get(c, {}).get("run", []), lo, hi)
        total += busy_per_bin(s, e, edges)
    total /= edges[1] - edges[0]
    ax.fill_between(np.repeat(edges, 2)[1:-1], 0, np.repeat(total, 2),
                    color=RUN_COLOUR, linewidth=0)
    ax.set_ylim(0, ncaps * 1.05)
    if ncaps <= 8:
        ax.set_yticks(range(ncaps + 1))
    else:
        ax.yaxis.get_major_locator().set_params(integer=True, nbins=5)
    ax.set_ylabel("activity\n(capabilities)", fontsize=8.5)
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    mean = total.mean() if len(total) else 0
    ax.set_title(f"mean {mean:.2f} of {ncaps} capabilities running", loc="right",
                 fontsize=8, color="#333333", pad=3)

    # Capability rows.
    cap_y = {}
    binned = []   # names of the rows drawn binned
    for c in caps:
        ax = ax_of[("cap", c)]
        kinds = tr.spans.get(c, {})
        count = sum(len(span_arrays(kinds.get(k, []), lo, hi)[0])
                    for k in ("run", "idle", "sleeping"))
        if count > max_spans:
            binned.append(f"cap {c}")
            draw_binned(ax, kinds, 0, 1, lo, hi, bins)
        else:
            draw_spans(ax, kinds.get("sleeping", []), 0.1, 0.8, SLEEP_COLOUR, lo, hi, min_w)
            draw_spans(ax, kinds.get("idle", []), 0.1, 0.8, IDLE_COLOUR, lo, hi, min_w)
            draw_spans(ax, kinds.get("run", []), 0.0, 1.0, RUN_COLOUR, lo, hi, min_w,
                       edge=RUN_EDGE, labels=True, label_width=label_width)
        ax.set_ylim(-0.05, 1.05)
        ax.set_yticks([])
        ax.set_ylabel(tr.names.get(c, f"capability {c}").replace("capability", "cap"),
                      rotation=0, ha="right", va="center", fontsize=9)
        cap_y[c] = ax

    # Wake-up flows (drawn last, once every row's limits are fixed).
    flows = [f for f in tr.flows if lo <= f[3] <= hi and f[2] in cap_y
             and (f[0] in cap_y or f[0] == IO_TID)]

    # Spark counters under each capability.
    for c in spark_caps:
        ax = ax_of[("sparks", c)]
        pts = sorted(tr.counters.get(c, []), key=lambda p: p[0])
        handles = []
        top = 0.0
        since = "+" if lo > t0 else ""   # counts within a window: increments
        for name, colour in SPARK_COLOURS.items():
            xs = np.array([ts for ts, v in pts if name in v])
            ys = np.array([v[name] for ts, v in pts if name in v])
            if not len(xs) or (name == "overflowed" and not ys.any()):
                continue
            # Cumulative counters: each holds its value until the next
            # sample; shown as counts since the window's start.
            at = np.concatenate([[0.0], ys])
            base = at[np.searchsorted(xs, lo, side="left")]   # before the window
            end = at[np.searchsorted(xs, hi, side="right")]   # at its end
            inside = (xs >= lo) & (xs <= hi)
            sx = np.concatenate([[lo], xs[inside], [hi]])
            sy = np.concatenate([[base], ys[inside], [end]]) - base
            ax.step(sx, sy, where="post", color=colour, linewidth=1.3)
            top = max(top, sy.max())
            handles.append(Line2D([], [], color=colour, linewidth=1.5,
                                  label=f"{name} {since}{int(end - base):,}"))
        marks = tr.instants.get(c, {})
        nmarks = sum(len(v) for v in marks.values())
        if marks and nmarks <= 5000:
            for name, colour in SPARK_COLOURS.items():
                xs = [x for x in marks.get(name, []) if lo <= x <= hi]
                if xs:
                    ymax = top if top else 1.0
                    ax.vlines(xs, ymax * 0.0, ymax * 0.12, color=colour, linewidth=0.8)
                    if not pts:
                        handles.append(Line2D([], [], color=colour, label=f"{name} ({len(xs)})"))
        ax.set_ylim(0, (top or 1.0) * 1.15)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylabel("sparks", rotation=0, ha="right", va="center", fontsize=8)
        ax.yaxis.get_major_locator().set_params(nbins=3)
        if handles:
            ax.legend(handles=handles, loc="upper left", fontsize=7, ncol=len(handles),
                      frameon=True, framealpha=0.85, borderpad=0.3, handlelength=1.5,
                      columnspacing=1.2)

    # Tasks and the IO manager.
    io_y = None
    if extra:
        ax = ax_of["extra"]
        ticks, names = [], []
        y = 0
        for tid in reversed(shown_tasks):
            kinds = tr.spans[tid]
            draw_spans(ax, kinds.get("safe_call", []), y + 0.15, 0.7, SAFE_CALL_COLOUR,
                       lo, hi, min_w, labels=True, label_width=label_width,
                       label_prefix="thread ")
            draw_spans(ax, kinds.get("in_call", []), y + 0.15, 0.7, IN_CALL_COLOUR,
                       lo, hi, min_w, labels=True, label_width=label_width,
                       label_prefix="thread ")
            for k in kinds:
                if k not in ("safe_call", "in_call"):
                    draw_spans(ax, kinds[k], y + 0.15, 0.7, "#999999", lo, hi, min_w)
            ticks.append(y + 0.5)
            names.append(tr.names.get(tid, f"task {tid - TASK_TID0}"))
            y += 1
        if has_io:
            for k, spans in tr.spans[IO_TID].items():
                draw_spans(ax, spans, y + 0.15, 0.7, IO_COLOUR if k == "io" else "#999999",
                           lo, hi, min_w)
            ticks.append(y + 0.5)
            names.append(tr.names.get(IO_TID, "io manager"))
            io_y = y + 0.5
            y += 1
        if len(tasks) > len(shown_tasks):
            names[0] += f" (+{len(tasks) - len(shown_tasks)} tasks not shown)"
        ax.set_ylim(0, y)
        ax.set_yticks(ticks)
        ax.set_yticklabels(names, fontsize=8.5)
        ax.tick_params(axis="y", length=0)
        for yy in range(1, y):
            ax.axhline(yy, color="#eeeeee", linewidth=0.6)
    last = axes[-1]
    last.set_xlim(lo, hi)
    last.set_xlabel("time since start (ms)", fontsize=9)
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(axis="x", labelsize=8)

    if flows and len(flows) <= 3000:
        # In figure coordinates, so that a line can cross rows.
        to_fig = fig.transFigure.inverted()
        lines = []
        for tid0, ts0, tid1, ts1 in flows:
            if tid0 in cap_y:
                a0, y0 = cap_y[tid0], 0.5
            elif io_y is not None:
                a0, y0 = ax_of["extra"], io_y
            else:
                continue
            p0 = to_fig.transform(a0.transData.transform((max(ts0, lo), y0)))
            p1 = to_fig.transform(cap_y[tid1].transData.transform((ts1, 0.5)))
            lines.append([p0, p1])
        fig.add_artist(LineCollection(lines, colors=WAKE_COLOUR, linewidths=0.7,
                                      alpha=0.6, transform=fig.transFigure, zorder=5))

    present = {k for c in caps for k in tr.spans.get(c, {})}
    legend = [Patch(color=colour, label=text) for kind, colour, text in (
        ("run", RUN_COLOUR, "running a green thread"),
        ("idle", IDLE_COLOUR, "idle (looking for work)"),
        ("sleeping", SLEEP_COLOUR, "sleeping (parked in the OS)")) if kind in present]
    if flows and len(flows) <= 3000:
        legend.append(Line2D([], [], color=WAKE_COLOUR, alpha=0.7, label="wake-up"))
    if any("safe_call" in tr.spans[t] for t in shown_tasks):
        legend.append(Patch(color=SAFE_CALL_COLOUR, label="safe call"))
    if any("in_call" in tr.spans[t] for t in shown_tasks):
        legend.append(Patch(color=IN_CALL_COLOUR, label="in-call"))
    if has_io:
        legend.append(Patch(color=IO_COLOUR, label="io manager waiting"))
    fig.legend(handles=legend, loc="lower left", ncol=len(legend), fontsize=8,
               frameon=False, bbox_to_anchor=(0.06, 0.0))
    notes = []
    if binned:
        notes.append(f"dense rows binned ({bins} bins)")
    if len(flows) > 3000:
        notes.append(f"{len(flows):,} wake-ups not drawn")
    if tr.skipped:
        notes.append(f"{tr.skipped} malformed events ignored")
    if notes:
        fig.text(0.99, 0.995, "; ".join(notes), ha="right", va="top", fontsize=7.5,
                 color="#555555")
    save(fig, out)
    return binned


def save(fig, out):
    """Write the picture; a path that cannot be written is a BadInput."""
    import matplotlib.pyplot as plt
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        raise BadInput(f"cannot write {out}: {e.strerror or e}")
    finally:
        plt.close(fig)


def cmd_trace(args):
    tr = load_trace(args.trace)   # before the slow import: bad input fails fast
    if args.from_ms is not None and args.to_ms is not None and args.to_ms <= args.from_ms:
        raise BadInput(f"empty time window: --from-ms {args.from_ms:g} --to-ms {args.to_ms:g}")
    import_matplotlib()
    binned = render_trace(tr, args.out, args.from_ms, args.to_ms, max_spans=args.max_spans)
    note = f" (binned: {', '.join(binned)})" if binned else ""
    print(f"wrote {args.out}{note}", file=sys.stderr)


# ---------------------------------------------------------------- table

CAPSTAN_COLOUR = "#1f5fa8"
GHC_COLOUR = "#e07b1a"
BETTER_COLOUR = "#1d7a33"
WORSE_COLOUR = "#b8322a"
NEAR_COLOUR = "#666666"
NEAR = 1.05    # ratios closer to 1 than this are shown grey: noise, here
TIME_UNITS = ("ns", "us", "ms", "s")


def load_results(path):
    """Read run.py's --json output; return (header dict, rows); raise
    BadInput if it is not one."""
    data = read_json(path, "benchmark results")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise BadInput(f"{path} is not benchmark results: no \"rows\" list "
                       "(nofib_like/run.py --json writes them)")
    rows = []
    for i, r in enumerate(data["rows"]):
        try:
            row = dict(program=str(r["program"]), caps=int(r["caps"]),
                       metric=str(r["metric"]), unit=str(r.get("unit") or r["metric"]),
                       higher=bool(r.get("higher_is_better")),
                       capstan=series_of(r["capstan"]),
                       ghc=series_of(r["ghc"]) if r.get("ghc") else None)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise BadInput(f"{path} is not benchmark results: row {i} is malformed ({e!r})")
        rows.append(row)
    if not rows:
        raise BadInput(f"{path} has no benchmark rows")
    return data, rows


def series_of(d):
    """(median, min, max, error) of one implementation's results; a
    median that is missing or not positive (no log scale) is None."""
    def num(k):
        v = d.get(k)
        return float(v) if isinstance(v, (int, float)) and v > 0 else None
    med = num("median")
    err = d.get("error")
    return (med, num("min") or med, num("max") or med,
            str(err) if err else (None if med else "no result"))


def ratio_text(row):
    """("2.7x faster", colour) comparing capstan's median with GHC's,
    honouring higher-is-better metrics; ("", None) without both."""
    c, g = row["capstan"][0], row["ghc"][0] if row["ghc"] else None
    if not c or not g:
        return "", None
    better = c > g if row["higher"] else c < g
    factor = max(c, g) / min(c, g)
    unit = row["unit"]
    timed = (unit.split("/")[0] in TIME_UNITS or unit.endswith("/s")
             or row["metric"].rsplit("_", 1)[-1] in TIME_UNITS)
    words = ("faster", "slower") if timed else ("better", "worse")
    if factor < 1.005:
        return "the same", NEAR_COLOUR
    text = f"{fmt_value(factor)}\u00d7 {words[0] if better else words[1]}"
    if factor < NEAR:
        return text, NEAR_COLOUR   # within the noise of this machine
    return text, BETTER_COLOUR if better else WORSE_COLOUR


def fmt_value(v):
    """A median in at most 4 characters or so: 0.116, 13.5, 4353, 13.4k, 1.75M."""
    if v is None:
        return "-"
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    if v >= 1e4:
        return f"{v / 1e3:.3g}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def render_table(data, rows, out):
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    # Group the rows by program, in their order; -N1 above -N2.
    groups = {}
    for r in rows:
        groups.setdefault(r["program"], []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: r["caps"])
    nsub = sum(len(g) for g in groups.values())
    gap = 0.6
    height = 1.6 + 0.26 * nsub + 0.12 * gap * len(groups)
    fig, ax = plt.subplots(figsize=(13, height))
    top_in, bottom_in = 1.05, 0.75
    fig.subplots_adjust(left=0.20, right=0.64, top=1 - top_in / height,
                        bottom=bottom_in / height)
    right = blended_transform_factory(ax.transAxes, ax.transData)
    left = blended_transform_factory(fig.transFigure, ax.transData)

    y = 0.0
    yticks, ylabels = [], []
    values = []
    for gi, (prog, group) in enumerate(groups.items()):
        first = y
        for r in group:
            yticks.append(y)
            ylabels.append(f"-N{r['caps']}")
            c, g = r["capstan"], r["ghc"]
            pts = [(s, colour, marker) for s, colour, marker in
                   ((c, CAPSTAN_COLOUR, "o"), (g, GHC_COLOUR, "D")) if s and s[0]]
            if len(pts) == 2:
                ax.plot([c[0], g[0]], [y, y], color="#bbbbbb", linewidth=2.2,
                        solid_capstyle="butt", zorder=1)
            for (med, lo, hi, _), colour, marker in pts:
                ax.plot([lo, hi], [y, y], color=colour, linewidth=1.0, zorder=2)
                ax.plot([med], [y], marker=marker, color=colour, markersize=6.5 if marker == "o" else 5.5,
                        linestyle="none", zorder=3)
                values += [lo, hi]
            # The right-hand column: medians, then the ratio.
            if c[0]:
                text = fmt_value(c[0])
                if g and g[0]:
                    text += f" vs {fmt_value(g[0])}"
                elif g:
                    text += " vs FAIL"
                else:
                    text += "  (no twin)"
            else:
                text = "FAIL" + (f" vs {fmt_value(g[0])}" if g and g[0] else "")
            ax.text(1.02, y, text, transform=right, va="center", fontsize=8.5,
                    color="#333333")
            word, colour = ratio_text(r)
            if c[3]:
                word, colour = "capstan failed", WORSE_COLOUR
            elif g and g[3]:
                word, colour = "twin failed", NEAR_COLOUR
            if word:
                ax.text(1.32, y, word, transform=right, va="center", fontsize=8.5,
                        color=colour, fontweight="bold")
            y += 1
        mid = (first + y - 1) / 2
        unit = group[0]["unit"] + ("  (higher is better)" if group[0]["higher"] else "")
        ax.annotate(prog, (0.005, mid), xycoords=left, xytext=(0, 1),
                    textcoords="offset points", va="bottom", ha="left",
                    fontsize=9.5, fontweight="bold")
        ax.annotate(unit, (0.005, mid), xycoords=left, xytext=(0, -1.5),
                    textcoords="offset points", va="top", ha="left",
                    fontsize=8, color="#555555")
        if gi % 2 == 0:
            ax.axhspan(first - 0.5 - gap / 2 + 0.3, y - 0.5 + gap / 2 - 0.3 + 0.0,
                       color="#f3f3f3", zorder=0)
        y += gap

    ax.set_xscale("log")
    if values:
        lo, hi = min(values), max(values)
        ax.set_xlim(lo / 2, hi * 2)
    ax.set_ylim(y - gap + 0.2, -0.8)
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels, fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8.5, top=True, labeltop=True)
    ax.grid(axis="x", which="major", color="#dddddd", linewidth=0.7)
    ax.set_axisbelow(True)
    ax.set_xlabel("median, in each row's own unit (log scale); whiskers: min..max of the runs",
                  fontsize=9)
    for side in ("left", "right"):
        ax.spines[side].set_visible(False)
    ax.text(1.02, -0.75, "capstan vs GHC", transform=right, fontsize=9, fontweight="bold",
            va="bottom")
    ax.text(1.32, -0.75, "capstan is", transform=right, fontsize=9, fontweight="bold",
            va="bottom")

    ghc = data.get("ghc")
    title = "capstan against its GHC twins" + (f" (GHC {ghc})" if ghc else "")
    fig.text(0.005, 1 - 0.12 / height, title, fontsize=13, fontweight="bold", va="top")
    sub = ", ".join(str(x) for x in (data.get("date"), data.get("machine")) if x)
    if data.get("reps"):
        sub += f"; medians of {data['reps']} runs"
    if sub:
        fig.text(0.005, 1 - 0.45 / height, sub, fontsize=8.5, color="#555555", va="top")
    legend = [Line2D([], [], marker="o", color=CAPSTAN_COLOUR, linestyle="none", label="capstan"),
              Line2D([], [], marker="D", color=GHC_COLOUR, linestyle="none", label="GHC twin"),
              Line2D([], [], color="#888888", linewidth=1, label="min..max")]
    fig.legend(handles=legend, loc="upper right", ncol=3, fontsize=9, frameon=False,
               bbox_to_anchor=(0.995, 1 - 0.08 / height))
    if data.get("command"):
        fig.text(0.005, 0.1 / height, f"command: {data['command']}", fontsize=7.5,
                 color="#777777", va="bottom")
    save(fig, out)


def cmd_table(args):
    data, rows = load_results(args.results)
    import_matplotlib()
    render_table(data, rows, args.out)
    print(f"wrote {args.out}", file=sys.stderr)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("trace", help="render a +RTS -l event trace")
    t.add_argument("trace", help="the trace (JSON)")
    t.add_argument("-o", "--out", required=True, help="the PNG to write")
    t.add_argument("--from-ms", type=float, default=None, help="window start (ms)")
    t.add_argument("--to-ms", type=float, default=None, help="window end (ms)")
    t.add_argument("--max-spans", type=int, default=20000,
                   help="a capability row with more spans than this in the window "
                        "is drawn binned (default 20000)")
    t.set_defaults(run=cmd_trace)
    b = sub.add_parser("table", help="draw the nofib_like results (run.py --json)")
    b.add_argument("results", help="the results (JSON, e.g. build/nofib_results.json)")
    b.add_argument("-o", "--out", required=True, help="the PNG to write")
    b.set_defaults(run=cmd_table)
    args = ap.parse_args()
    try:
        args.run(args)
    except BadInput as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
