#!/usr/bin/env python3
"""scripts/plot.py: each subcommand writes a PNG of plausible size from the
fixtures here, and bad input gives a one-line error and a non-zero exit.

    python3 tests/tools/plot_test.py      (meson: the tools_plot unit test)

Exits 77 (meson's "skipped") when no python3 with matplotlib is installed.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PLOT = ROOT / "scripts" / "plot.py"
SAMPLE_TRACE = HERE / "sample_trace.json"


def python_with_matplotlib():
    """This python, or Debian's (where python3-matplotlib installs), or None."""
    for py in (sys.executable, "/usr/bin/python3"):
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", "import matplotlib, numpy"], capture_output=True).returncode == 0:
            return py
    return None


PYTHON = python_with_matplotlib()


def plot(*args):
    return subprocess.run([PYTHON, str(PLOT), *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def png_size(path):
    """(width, height) from a PNG's IHDR chunk; fails if it is not a PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


class Fixture(unittest.TestCase):
    """The sample trace keeps the schema's invariants (docs/trace.md), so
    the pictures are tested on something the writer could produce."""

    def test_sample_trace_invariants(self):
        events = json.loads(SAMPLE_TRACE.read_text())["traceEvents"]
        spans = {}
        for e in events:
            if e["ph"] == "X":
                spans.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
        for tid, s in spans.items():
            s.sort()
            for a, b in zip(s, s[1:]):
                self.assertLessEqual(a[1], b[0], f"overlapping spans on tid {tid}")
        runs = {(e["tid"], e["ts"]) for e in events
                if e["ph"] == "X" and e["cat"] == "thread"}
        starts = {e["id"]: e for e in events if e["ph"] == "s"}
        finishes = [e for e in events if e["ph"] == "f"]
        self.assertTrue(finishes)
        for f in finishes:
            self.assertIn(f["id"], starts)
            self.assertIn((f["tid"], f["ts"]), runs)
            self.assertLessEqual(starts[f["id"]]["ts"], f["ts"])
        kinds = {(e["ph"], e.get("cat"), e.get("name")) for e in events}
        for want in [("X", "idle", "idle"), ("X", "idle", "sleeping"),
                     ("X", "foreign", "safe_call"), ("X", "io", "io wait")]:
            self.assertIn(want, kinds)
        self.assertTrue(any(e["ph"] == "C" for e in events))


class Trace(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def render(self, trace, *extra):
        out = self.dir / "out.png"
        p = plot("trace", trace, "-o", out, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        w, h = png_size(out)
        self.assertGreaterEqual(w, 1000)
        self.assertGreaterEqual(h, 300)
        self.assertGreater(out.stat().st_size, 20_000)
        self.stderr = p.stderr
        return w, h

    def test_sample(self):
        w, h = self.render(SAMPLE_TRACE)
        # Two capabilities with their spark rows and three extra tracks
        # make a taller picture than one with the run spans alone.
        events = json.loads(SAMPLE_TRACE.read_text())["traceEvents"]
        runs_only = self.dir / "runs.json"
        runs_only.write_text(json.dumps(
            {"traceEvents": [e for e in events if e.get("cat") == "thread"]}))
        _, h_runs = self.render(runs_only)
        self.assertGreater(h, h_runs)

    def test_window(self):
        self.render(SAMPLE_TRACE, "--from-ms", "1.0", "--to-ms", "1.5")

    def test_dense_rows_are_binned(self):
        # Spans far above --max-spans take the binned path.
        events = []
        for cap in (0, 1):
            t = 0.0
            for i in range(3000):
                cat, name = [("thread", f"thread {i % 7}"), ("idle", "idle"),
                             ("idle", "sleeping")][i % 3]
                events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": cap,
                               "ts": t, "dur": 3.0, "args": {"thread": i % 7}})
                t += 3.5
        dense = self.dir / "dense.json"
        dense.write_text(json.dumps({"traceEvents": events}))
        self.render(dense, "--max-spans", "100")
        self.assertIn("binned: cap 0, cap 1", self.stderr)
        self.render(dense)
        self.assertNotIn("binned", self.stderr)

    def test_bad_input(self):
        bad = {"notjson.json": "this is not json\n",
               "empty.json": "",
               "other.json": json.dumps({"rows": []}),
               "noevents.json": json.dumps({"traceEvents": [{"ph": "X"}, 3]})}
        for name, text in bad.items():
            (self.dir / name).write_text(text)
        cases = [[self.dir / n] for n in bad] + [[self.dir / "missing.json"]]
        cases.append([SAMPLE_TRACE, "--from-ms", "2", "--to-ms", "1"])
        for case in cases:
            out = self.dir / "bad.png"
            p = plot("trace", *case, "-o", out)
            self.assertNotEqual(p.returncode, 0, case)
            self.assertNotIn("Traceback", p.stderr, case)
            self.assertTrue(p.stderr.startswith("plot.py: "), p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertFalse(out.exists(), case)


if __name__ == "__main__":
    if PYTHON is None:
        print("skipped: no python3 with matplotlib (scripts/setup.sh installs it)")
        sys.exit(77)
    unittest.main()
