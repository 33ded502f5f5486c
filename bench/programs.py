"""The programs a benchmark runs: the built ones it needs, and running them (a failure ends the
benchmark, naming what failed)."""
import os
import subprocess
import sys


def built(prog, build_dir, rel_paths, hint):
    """The paths of REL_PATHS under BUILD_DIR; exits PROG naming the first one that is not an
    executable, and HINT (what to build)."""
    exes = [os.path.join(build_dir, rel) for rel in rel_paths]
    for exe in exes:
        if not os.access(exe, os.X_OK):
            sys.exit(f"{prog}: {exe} is missing; {hint}")
    return exes


def checked_run(prog, cmd, what):
    """Runs CMD (its items as str) and returns its stdout; exits PROG with what failed, its status
    and its output when it fails."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{prog}: {what} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout
