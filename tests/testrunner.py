#!/usr/bin/python3
"""The one runner of dscache's Python tests, and the one way they run a command.

Used by tests/cli/cli_helpers.py (the `dscache` CLI tests) and tests/python/pyhelpers.py (the
Python module's tests); pytest is not a dependency. A test file is run as `FILE CASE [CASE...]`
(meson runs one case per test) or `FILE --all`. Each case is a function run in a fresh temporary
directory, given as `tmp` (a pathlib.Path) when the function takes a parameter. One line per
case: PASS, FAIL (with its traceback) or SKIP. Exit status: 0 every case passed, 1 one failed
(or the preflight refused), 2 usage (no case or an unknown one: a `usage:` line and a `cases:`
line on stderr, which tests/cli/selfcheck.py reads), 77 every case skipped (meson's SKIP).
"""

import inspect
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


class Failure(Exception):
    """A check failed; the message says what was expected and what was seen."""


class Skip(Exception):
    """The case cannot run here (the message says why): counted as skipped, not failed."""


def run_cmd(cmd, expect_rc=0, env=None, cwd=None, timeout=120):
    """Runs `cmd` (a list; each item str()'d) with stdout and stderr captured and decoded as text
    (invalid UTF-8 replaced); returns the CompletedProcess. Raises Failure, quoting the command and
    both streams, when the exit code is not `expect_rc` (None accepts any) or it ran past
    `timeout` seconds. `env`: the whole environment (None: this process's)."""
    cmd = [str(a) for a in cmd]
    try:
        p = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"command timed out after {timeout}s: {' '.join(cmd)}") from e
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    if expect_rc is not None and p.returncode != expect_rc:
        raise Failure(
            f"command: {' '.join(cmd)}\nexpected exit {expect_rc}, got {p.returncode}\n"
            f"--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}")
    return p


def test_functions(namespace):
    """The `test_*` functions of a module's globals(), by name: the cases of a file that names
    its cases by function rather than in a table."""
    return {n: f for n, f in sorted(namespace.items()) if n.startswith("test_") and callable(f)}


def main(cases, argv, prefix="dscache-test-", preflight=None):
    """Runs the cases named in argv[1:] (`--all`: every one) of `cases` (name -> function) and
    returns the exit status described above. `preflight()`, called once the names are known good,
    returns None or the reason nothing can run (printed; exit 1)."""
    names = list(cases) if argv[1:] == ["--all"] else argv[1:]
    if not names or any(n not in cases for n in names):
        print(f"usage: {argv[0]} CASE [CASE...] | --all\ncases: {' '.join(cases)}",
              file=sys.stderr)
        return 2
    if preflight is not None:
        refused = preflight()
        if refused:
            print(refused, file=sys.stderr)
            return 1
    failed = skipped = 0
    for name in names:
        f = cases[name]
        t0 = time.monotonic()
        try:
            with tempfile.TemporaryDirectory(prefix=f"{prefix}{name}-") as d:
                if inspect.signature(f).parameters:
                    f(Path(d))
                else:
                    f()
        except Skip as e:
            skipped += 1
            print(f"SKIP {name}: {e}", flush=True)
        except Exception:  # noqa: BLE001 - any error fails the case with its traceback
            failed += 1
            traceback.print_exc()
            print(f"FAIL {name} ({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)
        else:
            print(f"PASS {name} ({time.monotonic() - t0:.1f}s)", flush=True)
    if failed:
        return 1
    return 77 if skipped == len(names) else 0

