#!/usr/bin/python3
"""check_layering.py's folder rules for libcache/src, shown to fail: each case writes a minimal
source tree with one include (or one misplaced file), runs the checker on it as a process and
checks its exit status and the FILE:LINE and rule it prints.

Usage: test_check_layering.py CHECK_LAYERING_PY     Exit 0 = every case holds, 1 = one failed.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

# The smallest tree the checker accepts: a public header, a tools/ header, and two folders of
# libcache/src (util/ lowest, serve/ highest) with one header each.
BASE = {
    "libcache/include/dscache/error.h": "#pragma once\n",
    "tools/cli_util.h": "#pragma once\n",
    "libcache/src/util/io_util.h": "#pragma once\n",
    "libcache/src/json/parse.h": "#pragma once\n",
    "libcache/src/remote/mirror.h": "#pragma once\n",
    "libcache/src/read/cache_impl.h": "#pragma once\n",
    "libcache/src/serve/prefetcher.h": "#pragma once\n",
    "libcache/src/serve/loader.cpp": '#include "serve/prefetcher.h"\n#include "util/io_util.h"\n',
}

UPWARD = "libcache/src/util/io.cpp:3: #include serve/prefetcher.h: util/ is below serve/ (util < "
# [what, files added to BASE, expected exit status, strings the output must hold]
CASES = [
    ("downward and same-folder includes pass", {
        "libcache/src/read/cache.cpp": '#include "read/cache_impl.h"\n#include "remote/mirror.h"\n'
                                       '#include "util/io_util.h"\n#include "dscache/error.h"\n',
        "libcache/ingest/coco.cpp": '#include "json/parse.h"\n',
    }, 0, ["PASS layering", "0 violations"]),
    ("a lower folder including a higher one fails with FILE:LINE and the rule", {
        "libcache/src/util/io.cpp": '#include <cstdio>\n\n#include "serve/prefetcher.h"\n',
    }, 1, [UPWARD, "a lower folder never includes a higher one", "FAIL layering",
           "1 violations"]),
    ("remote/ is below read/: remote/ including read/ fails", {
        "libcache/src/remote/streamed.cpp": '#include "read/cache_impl.h"\n',
    }, 1, ["libcache/src/remote/streamed.cpp:1: #include read/cache_impl.h: remote/ is below "
           "read/"]),
    ("a header counts as its folder's: util/ header including serve/ fails", {
        "libcache/src/util/bad.h": '#pragma once\n#include "serve/prefetcher.h"\n',
    }, 1, ["libcache/src/util/bad.h:2: #include serve/prefetcher.h: util/ is below serve/"]),
    ("a private include without its folder fails", {
        "libcache/src/serve/sampler.cpp": '#include "prefetcher.h"\n',
    }, 1, ["libcache/src/serve/sampler.cpp:1: #include prefetcher.h: a private include names its "
           "folder"]),
    ("a source directly in libcache/src fails", {
        "libcache/src/loose.cpp": '#include "util/io_util.h"\n',
    }, 1, ["libcache/src/loose.cpp: every source of libcache/src lives in a subject folder"]),
    ("a folder the order does not name fails", {
        "libcache/src/misc/thing.cpp": '#include "util/io_util.h"\n',
    }, 1, ["libcache/src/misc/: a folder of libcache/src that the layering order"]),
    ("ingest reaching past json/ into libcache/src fails", {
        "libcache/ingest/coco.cpp": '#include "json/parse.h"\n#include "read/cache_impl.h"\n',
    }, 1, ["libcache/ingest/coco.cpp:2: #include read/cache_impl.h: ingest uses libcache/src's "
           "json/ only"]),
]


def run_case(checker, files):
    with tempfile.TemporaryDirectory(prefix="layering-") as tmp:
        root = Path(tmp)
        for rel, text in {**BASE, **files}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        r = subprocess.run([sys.executable, str(checker), str(root)], capture_output=True,
                           text=True, timeout=60)
        return r.returncode, r.stdout + r.stderr


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    checker = Path(argv[1]).resolve()
    failed = 0
    for what, files, want_rc, want in CASES:
        rc, out = run_case(checker, files)
        missing = [w for w in want if w not in out]
        if rc != want_rc or missing:
            failed += 1
            print(f"FAIL {what}: exit {rc} (want {want_rc}), missing {missing}\n{out}")
        else:
            print(f"ok   {what}")
    print(f"{len(CASES) - failed}/{len(CASES)} cases hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
