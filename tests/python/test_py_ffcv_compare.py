#!/usr/bin/python3
"""bench/ffcv_compare.py refuses what it cannot measure before any work, with exit 2 and a
message naming the path and the reason: FFCV is read from --ffcv-path (never a dependency), so a
wrong folder or an FFCV whose C extension was not built must say so, not fail deep in a run.
Needs no FFCV: every case stops before one would be used."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyhelpers import DSCACHE, main  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "ffcv_compare.py")


def test_ffcv_compare_refuses_bad_inputs(tmp):
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    unbuilt = os.path.join(tmp, "unbuilt")  # an ffcv package whose _libffcv was never compiled
    os.makedirs(os.path.join(unbuilt, "ffcv"))
    with open(os.path.join(unbuilt, "ffcv", "__init__.py"), "w") as f:
        f.write("import ffcv._libffcv\n")
    missing_bin = os.path.join(tmp, "no-such-dscache")
    cases = [  # (extra arguments, words the message must hold)
        (["--ffcv-path", empty], [empty, "no ffcv/ package folder"]),
        (["--ffcv-path", unbuilt], [unbuilt, "cannot import FFCV", "_libffcv"]),
        (["--ffcv-path", empty, "--parts", "serve,bogus"], ["--parts", "bogus"]),
        (["--ffcv-path", empty, "--dscache", missing_bin], [missing_bin, "not found"]),
    ]
    for extra, words in cases:
        cmd = [sys.executable, SCRIPT, "--dscache", DSCACHE, "--out",
               os.path.join(tmp, "out")] + extra
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        assert p.returncode == 2, (extra, p.returncode, p.stderr)
        for w in words:
            assert w in p.stderr, (extra, w, p.stderr)
        assert not os.path.exists(os.path.join(tmp, "out", "photos")), (extra, "did work")


if __name__ == "__main__":
    sys.exit(main(globals()))
