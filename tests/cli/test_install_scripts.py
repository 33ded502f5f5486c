#!/usr/bin/python3
"""scripts/quickstart and scripts/check on a machine short of memory (issue 38, B2): quickstart
compiles only the two programs it runs, and when a compiler is killed (the OOM killer's signal 9)
both say so and how to rerun (`DSCACHE_JOBS=1 scripts/...`) instead of a bare "cc1plus killed".
The scripts run against a fake `meson` (and `dpkg-query`, so that setup-deps finds every package
present and installs nothing) first on PATH, which records its arguments and fails the compile
the way GCC, ld or the kernel do. Needs no build; DSCACHE is only the runner's preflight.
"""

import os
import stat
import sys
from pathlib import Path

from cli_helpers import check, check_eq, main, testrunner

SOURCE_ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))

# How a compile fails: (what the fake meson compile prints, how it exits).
GCC_KILLED = ("c++: fatal error: Killed signal terminated program cc1plus\n"
              "compilation terminated.\nninja: build stopped: subcommand failed.", "exit 1")
LD_KILLED = ("collect2: fatal error: ld terminated with signal 9 [Killed]", "exit 1")
BARE_KILLED = ("[240/295] Compiling C++ object tests/test_x.p/test_x.cpp.o\ncc1plus killed",
               "exit 1")
SELF_KILLED = ("[12/295] Compiling C++ object libcache/x.cpp.o", "kill -9 $$")
SYNTAX_ERROR = ("../libcache/src/cache.cpp:12:3: error: expected ';' before '}' token\n"
                "ninja: build stopped: subcommand failed.", "exit 1")


def fake_tools(tmp, compile_output, compile_exit):
    """A bin/ with `meson` (logs each call's arguments to meson.log; `setup` makes build.ninja;
    `compile` prints compile_output and runs compile_exit) and `dpkg-query` (every package
    installed); returns (bin dir, log path)."""
    bindir = tmp / "bin"
    bindir.mkdir()
    log = tmp / "meson.log"
    meson = f"""#!/bin/bash
echo "$*" >> {log}
case "$1" in
  setup) for a in "$@"; do [[ "$a" == -* || "$a" == setup ]] || mkdir -p "$a"; done
         for a in "$@"; do [[ -d "$a" && "$a" != . ]] && touch "$a/build.ninja"; done; exit 0 ;;
  compile) cat <<'OUT'
{compile_output}
OUT
           {compile_exit} ;;
  *) exit 0 ;;
esac
"""
    dpkg_query = "#!/bin/sh\necho 'install ok installed'\n"
    for name, text in (("meson", meson), ("dpkg-query", dpkg_query)):
        p = bindir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return bindir, log


def run_script(tmp, script, failure, *args):
    bindir, log = fake_tools(tmp, *failure)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               DSCACHE_BUILDDIR=str(tmp / "build"),
               DSCACHE_SANITIZE_BUILDDIR=str(tmp / "build-san"),
               DSCACHE_QUICKSTART_OUT=str(tmp / "out"), DSCACHE_JOBS="2")
    p = testrunner.run_cmd([SOURCE_ROOT / "scripts" / script, *args], None, env=env,
                           cwd=SOURCE_ROOT, timeout=120)
    calls = log.read_text().splitlines() if log.exists() else []
    return p, [c for c in calls if c.startswith("compile")]


def case_quickstart_builds_what_it_runs(tmp):
    """quickstart compiles tools/dscache and trainer/dscache-train, nothing else; a failed
    compile stops it before it runs anything."""
    p, compiles = run_script(tmp, "quickstart", SYNTAX_ERROR)
    check(p.returncode != 0, f"quickstart exited 0 after a failed compile:\n{p.stdout}{p.stderr}")
    check_eq(compiles, [f"compile -C {tmp / 'build'} -j 2 tools/dscache trainer/dscache-train"],
             "quickstart's meson compile calls")
    check("DSCACHE_JOBS=1" not in p.stdout + p.stderr,
          f"a syntax error is not a killed compiler, yet the hint was printed:\n{p.stderr}")
    check(not (tmp / "out").exists(), "quickstart went on after the compile failed")


def case_killed_compiler_hint(tmp):
    """Each way a killed compile shows itself, in each script: the hint names the command to
    rerun; scripts/check still ends with its failure count line."""
    runs = [("quickstart", (), "DSCACHE_JOBS=1 scripts/quickstart")]
    runs += [("check", (), "DSCACHE_JOBS=1 scripts/check"),
             ("check", ("--sanitize",), "DSCACHE_JOBS=1 scripts/check --sanitize")]
    n = 0
    for script, args, hint in runs:
        for failure in (GCC_KILLED, LD_KILLED, BARE_KILLED, SELF_KILLED):
            n += 1
            sub = tmp / f"{n}"
            sub.mkdir()
            p, compiles = run_script(sub, script, failure, *args)
            what = f"scripts/{script} {' '.join(args)} with {failure[0].splitlines()[-1]!r}"
            check(p.returncode != 0, f"{what}: exited 0")
            check_eq(len(compiles), 1, f"{what}: meson compile calls")
            check(hint in p.stderr and "killed" in p.stderr,
                  f"{what}: no '{hint}' hint on stderr:\n{p.stderr}")
            if script == "check":
                check_eq(p.stdout.strip().splitlines()[-1], "0 passed, 1 failed, 0 skipped",
                         f"{what}: last line")


CASES = {
    "quickstart_builds_what_it_runs": case_quickstart_builds_what_it_runs,
    "killed_compiler_hint": case_killed_compiler_hint,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
