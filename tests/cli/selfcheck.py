#!/usr/bin/python3
"""Self-check of the CLI test layout (needs no dscache binary).

For each test_*.py next to this file: run with an unknown case name (and with none), it must exit
2 and list its cases on stderr (cli_helpers.main); the cases listed must be exactly the rows that
tests/cli/meson.build registers for that file, so no case is left without a meson test and no
meson test names a case its file lacks. Exit 0 = pass, 1 = fail.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    rows = re.findall(r"\[\s*'(test_\w+\.py)'\s*,\s*'(\w+)'\s*\]",
                      (HERE / "meson.build").read_text())
    errors = []
    if not rows:
        errors.append("meson.build: no ['test_X.py', 'case'] rows found")
    names = [c for _, c in rows]
    dups = sorted({c for c in names if names.count(c) > 1})
    if dups:
        errors.append(f"meson.build: cases registered twice: {dups}")
    table = {}
    for f, c in rows:
        table.setdefault(f, []).append(c)
    files = sorted(p.name for p in HERE.glob("test_*.py"))
    if sorted(table) != files:
        errors.append(f"files in meson.build {sorted(table)} != test files here {files}")
    env = {k: v for k, v in os.environ.items() if k != "DSCACHE"}
    for f in files:
        for argv in (["no_such_case"], []):
            p = subprocess.run([sys.executable, str(HERE / f)] + argv, capture_output=True,
                               text=True, env=env, timeout=60)
            m = re.search(r"^cases: (.*)$", p.stderr, re.M)
            listed = m.group(1).split() if m else None
            if p.returncode != 2 or "usage:" not in p.stderr or listed is None:
                errors.append(f"{f} {argv}: want exit 2 with usage and a cases line, got exit "
                              f"{p.returncode}, stderr {p.stderr!r}")
            elif listed != table.get(f, []):
                errors.append(f"{f}: cases {listed} != meson.build rows {table.get(f, [])}")
    for e in errors:
        print("selfcheck:", e, file=sys.stderr)
    print(f"{'FAIL' if errors else 'PASS'} selfcheck ({len(rows)} cases in {len(files)} files)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
