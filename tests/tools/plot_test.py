#!/usr/bin/env python3
"""scripts/plot.py: each subcommand writes a PNG of plausible size from the
fixtures here, and bad input gives a one-line error and a non-zero exit.

    python3 tests/tools/plot_test.py      (meson: the tools_plot unit test)

Exits 77 (meson's "skipped") when no python3 with matplotlib is installed.
"""

import importlib.util
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
SAMPLE_RESULTS = HERE / "sample_results.json"


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


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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

    def check_png(self, out):
        w, h = png_size(out)
        self.assertGreaterEqual(w, 1000)
        self.assertGreaterEqual(h, 300)
        self.assertGreater(out.stat().st_size, 20_000)
        return w, h

    def render(self, trace, *extra):
        """Through the command line, as a user runs it."""
        out = self.dir / "out.png"
        p = plot("trace", trace, "-o", out, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("wrote", p.stderr)
        return self.check_png(out)

    def render_here(self, trace, lo=None, hi=None, max_spans=20000):
        """In this process (one matplotlib import for them all); returns
        (height, the rows drawn binned)."""
        out = self.dir / "here.png"
        binned = PLOTPY.render_trace(PLOTPY.load_trace(trace), out, lo, hi,
                                     max_spans=max_spans)
        return self.check_png(out)[1], binned

    def test_sample(self):
        w, h = self.render(SAMPLE_TRACE)
        # Two capabilities with their spark rows and three extra tracks
        # make a taller picture than one with the run spans alone.
        events = json.loads(SAMPLE_TRACE.read_text())["traceEvents"]
        runs_only = self.dir / "runs.json"
        runs_only.write_text(json.dumps(
            {"traceEvents": [e for e in events if e.get("cat") == "thread"]}))
        h_runs, _ = self.render_here(runs_only)
        self.assertGreater(h, h_runs)

    def test_window(self):
        self.render(SAMPLE_TRACE, "--from-ms", "1.0", "--to-ms", "1.5")

    def test_only_tasks(self):
        events = json.loads(SAMPLE_TRACE.read_text())["traceEvents"]
        tasks = self.dir / "tasks.json"
        tasks.write_text(json.dumps(
            {"traceEvents": [e for e in events if e.get("cat") == "foreign"]}))
        self.render_here(tasks)

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
        self.assertEqual(self.render_here(dense, max_spans=100)[1], ["cap 0", "cap 1"])
        self.assertEqual(self.render_here(dense)[1], [])
        # A window with few spans is drawn span by span again.
        self.assertEqual(self.render_here(dense, 1.0, 1.2, max_spans=100)[1], [])

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


class Table(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def render(self, results, here=False):
        out = self.dir / "table.png"
        if here:
            PLOTPY.render_table(*PLOTPY.load_results(results), out)
        else:
            p = plot("table", results, "-o", out)
            self.assertEqual(p.returncode, 0, p.stderr)
        w, h = png_size(out)
        self.assertGreaterEqual(w, 1000)
        self.assertGreater(out.stat().st_size, 20_000)
        return h

    def test_sample(self):
        # Rows with a twin, without one, failed on either side, and a
        # higher-is-better metric.
        h = self.render(SAMPLE_RESULTS)
        data = json.loads(SAMPLE_RESULTS.read_text())
        data["rows"] = data["rows"][:2]
        few = self.dir / "few.json"
        few.write_text(json.dumps(data))
        self.assertGreater(h, self.render(few, here=True))

    def test_what_run_py_writes(self):
        # run.py's --json rows (json_rows), from results as its runner
        # collects them, are what plot.py table reads.
        run = load_module("run", ROOT / "nofib_like" / "run.py")
        ring = next(b for b in run.BENCHMARKS if b.name == "ring")
        chan = next(b for b in run.BENCHMARKS if b.name == "chan")
        runs = lambda *vs: [{"ns_per_hop": v, "rss_kb": 4000.0} for v in vs]
        cells = {(ring, ("1000",), 1): {"capstan": (runs(40.0, 39.0, 43.0), None),
                                        "ghc": (runs(44.0, 45.0, 43.0), None)},
                 (ring, ("1000",), 2): {"capstan": (runs(54.0), "killed by SIGSEGV"),
                                        "ghc": (runs(86.0, 85.0, 90.0), None)},
                 (chan, ("1000",), 1): {"capstan": ([{"items_per_s": 5e7}], None)}}
        rows = run.json_rows(cells, have_ghc=True)
        self.assertEqual([r["caps"] for r in rows], [1, 2, 1])
        self.assertEqual(rows[0]["capstan"], {"median": 40.0, "min": 39.0, "max": 43.0,
                                              "runs": 3, "error": None,
                                              "secondary": {"rss_kb": 4000.0}})
        self.assertEqual(rows[0]["unit"], "ns/hop")
        self.assertIsNone(rows[1]["capstan"]["median"])
        self.assertEqual(rows[1]["capstan"]["error"], "killed by SIGSEGV")
        self.assertIsNone(rows[2]["ghc"])
        self.assertTrue(rows[2]["higher_is_better"])
        results = self.dir / "results.json"
        results.write_text(json.dumps({"rows": rows}))
        self.render(results, here=True)

    def test_bad_input(self):
        bad = {"notjson.json": "{", "norows.json": json.dumps({"traceEvents": []}),
               "empty_rows.json": json.dumps({"rows": []}),
               "malformed.json": json.dumps({"rows": [{"program": "ring"}]})}
        for name, text in bad.items():
            (self.dir / name).write_text(text)
        for case in [self.dir / n for n in bad] + [SAMPLE_TRACE]:
            out = self.dir / "bad.png"
            p = plot("table", case, "-o", out)
            self.assertEqual(p.returncode, 2, case)
            self.assertNotIn("Traceback", p.stderr, case)
            self.assertTrue(p.stderr.startswith("plot.py: "), p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertFalse(out.exists(), case)

    def test_without_matplotlib(self):
        # Status 3 (scripts/bench.sh then skips the picture), one line.
        # -S hides the installed packages; the variable stops the re-run
        # under /usr/bin/python3.
        env = dict(os.environ, CAPSTAN_PLOT_REEXEC="1")
        p = subprocess.run([PYTHON, "-S", str(PLOT), "table", str(SAMPLE_RESULTS),
                            "-o", str(self.dir / "x.png")],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("matplotlib is not installed", p.stderr)
        self.assertNotIn("Traceback", p.stderr)


if __name__ == "__main__":
    if PYTHON is None:
        print("skipped: no python3 with matplotlib (scripts/setup.sh installs it)")
        sys.exit(77)
    if os.path.realpath(PYTHON) != os.path.realpath(sys.executable):
        # Some renders run in this process: run under the python that has
        # matplotlib.
        os.execv(PYTHON, [PYTHON, __file__, *sys.argv[1:]])
    import matplotlib
    matplotlib.use("Agg")
    PLOTPY = load_module("plot", PLOT)
    unittest.main()
