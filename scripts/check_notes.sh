#!/usr/bin/env bash
# check_notes.sh - every Note referred to ("See Note [X]", "Note [X] in
# file", "Notes [X] and [Y]") in the sources, tests, scripts, docs and
# models (models/*.pml) is defined somewhere: a comment line "Note [X]"
# followed by a line of "~~~".
# Exits 1 and names each dangling reference otherwise.  Run by
# scripts/test.sh before the build.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - <<'PY'
import os, re, sys
roots = ["rts", "lib", "tests", "nofib_like", "examples", "scripts", "docs", "models", "README.md"]
exts = (".cpp", ".hpp", ".c", ".h", ".S", ".py", ".sh", ".md", ".build", ".pml")
files = []
for r in roots:
    if os.path.isfile(r):
        files.append(r)
    for d, _, fs in os.walk(r):
        files += [os.path.join(d, f) for f in fs if f.endswith(exts)]
defined, refs = {}, []
define = re.compile(r"^\s*(?://|#|\*)?\s*Note \[([^\]]+)\]\s*$")
for f in sorted(files):
    lines = open(f, encoding="utf-8", errors="replace").read().split("\n")
    for i, line in enumerate(lines[:-1]):
        m = define.match(line)
        if m and re.match(r"^\s*(?://|#|\*)?\s*~{3,}\s*$", lines[i + 1]):
            defined.setdefault(m.group(1), f)
    # Join wrapped comment lines, then find every "Note [X]" / "Notes [X] and [Y]".
    text = " ".join(re.sub(r"^\s*(?://+|#+|\*)\s?", "", l) for l in lines)
    text = re.sub(r"\s+", " ", text)
    for m in re.finditer(r"Notes? ((?:\[[^\]]+\](?:,? (?:and |or )?|/ ?)?)+)", text):
        for name in re.findall(r"\[([^\]]+)\]", m.group(1)):
            refs.append((f, name))
placeholder = lambda n: n in ("X", "Y", "Name") or not re.search(r"[A-Za-z]{2}", n) or "{" in n
bad = sorted({(f, n) for f, n in refs if n not in defined and not placeholder(n)})
for f, n in bad:
    print(f"check_notes: {f} refers to Note [{n}], which is defined nowhere", file=sys.stderr)
if bad:
    sys.exit(1)
print(f"check_notes: {len(defined)} Notes defined; all {len(set(refs))} references resolve")
PY
