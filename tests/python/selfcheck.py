#!/usr/bin/python3
"""Self-check of the Python module's test layout: every `test_*` function of
tests/python/test_*.py has exactly one row ['test_X.py', 'test_case'] in tests/meson.build's
py_cases table, and every row names a function that exists, so no test goes unrun.
Reads the files with ast (imports nothing). Exit 0 = pass, 1 = fail."""
import ast
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    rows = re.findall(r"\[\s*'(test_py_\w+\.py)'\s*,\s*'(test_\w+)'\s*\]",
                      (HERE.parent / "meson.build").read_text())
    errors = []
    if not rows:
        errors.append("tests/meson.build: no py_cases rows found")
    if len(set(rows)) != len(rows):
        errors.append("tests/meson.build: a py_cases row appears twice")
    found = set()
    for f in sorted(HERE.glob("test_*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found.add((f.name, node.name))
    for f, c in sorted(found - set(rows)):
        errors.append(f"{f}: {c} has no row in tests/meson.build py_cases")
    for f, c in sorted(set(rows) - found):
        errors.append(f"tests/meson.build: row [{f}, {c}] names no function")
    for e in errors:
        print("selfcheck:", e, file=sys.stderr)
    print(f"{'FAIL' if errors else 'PASS'} python selfcheck ({len(rows)} rows, {len(found)} tests)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
