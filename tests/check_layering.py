#!/usr/bin/python3
"""The dependency rules of docs/ARCHITECTURE.md, checked on the sources' #include lines.

Usage: check_layering.py SOURCE_ROOT     Exit 0 = every rule holds, 1 = a rule is broken (each
violation printed as FILE:LINE: the include and the rule it breaks).

- Public headers (libcache/include/dscache/, .../ingest/) include only the C++ standard library,
  POSIX headers and other dscache public headers: no third-party type can reach a user.
- libcache's core (src/) includes no OpenCV, TBB, LibTorch or Boost, and nothing of ingest,
  tools or the trainer. libjpeg (<jpeglib.h>, <jerror.h>) only in libcache/src/jpeg.cpp, the
  one file that wraps it (feature `jpeg`); never TurboJPEG.
- The ingest library includes no TBB, LibTorch, HDF5 or Boost, and nothing of tools or trainer.
- Nothing under trainer/ includes a header of tools/, and tools/ none of trainer/.
- The Python binding (python/) includes only libcache's public headers (not ingest), pybind11,
  and the C++ standard library: it wraps the contract, it reaches into nothing.
- Fuzz targets (tests/fuzz/) include only dscache public headers, their own helpers, the tests'
  shared temp dir (tests/temp_dir.h, itself standard library and POSIX only) and the standard
  library: they attack the contract a user's input meets, as a user links it.
- No meson.build outside tools/ compiles a source file that lives in tools/.
"""

import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
THIRD_PARTY = ("opencv2/", "tbb/", "oneapi/", "torch/", "ATen/", "c10/", "boost/", "hdf5",
               "H5", "nlohmann/", "zlib.h", "gloo/", "turbojpeg.h", "jpeglib.h", "jerror.h")
LIBJPEG = ("jpeglib.h", "jerror.h", "jmorecfg.h", "jconfig.h")
JPEG_WRAPPER = "libcache/src/jpeg.cpp"
SHARED_TEMP_DIR = "../temp_dir.h"  # tests/temp_dir.h, as tests/fuzz/ includes it


def includes(path):
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield n, m.group(1), m.group(2)


def sources(root, sub):
    d = root / sub
    return sorted(p for p in d.rglob("*") if p.suffix in (".h", ".hpp", ".cpp", ".cc"))


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[1]).resolve()
    errors = []
    tools_headers = {p.name for p in (root / "tools").glob("*.h")}
    trainer_headers = {p.name for p in (root / "trainer").glob("*.h")}

    def bad(p, n, inc, rule):
        errors.append(f"{p.relative_to(root)}:{n}: #include {inc}: {rule}")

    public = sources(root, "libcache/include/dscache")
    for p in public:
        for n, kind, inc in includes(p):
            if kind == '"' and not inc.startswith("dscache/"):
                bad(p, n, inc, "a public header includes only dscache/ headers")
            if inc.startswith(THIRD_PARTY):
                bad(p, n, inc, "no third-party header in the public contract")
    for p in sources(root, "libcache/src"):
        for n, kind, inc in includes(p):
            if inc.startswith(("opencv2/", "tbb/", "oneapi/", "torch/", "ATen/", "c10/", "boost/")):
                bad(p, n, inc, "libcache's core needs only the standard library (+ HDF5)")
            if inc.startswith("dscache/ingest/") or inc in tools_headers | trainer_headers:
                bad(p, n, inc, "the core depends on nothing above it")
            if inc == "turbojpeg.h":
                bad(p, n, inc, "the core uses libjpeg's API (jpeglib.h), not TurboJPEG")
            if inc in LIBJPEG and p.relative_to(root).as_posix() != JPEG_WRAPPER:
                bad(p, n, inc, f"libjpeg is included only by {JPEG_WRAPPER}")
    for p in sources(root, "libcache/ingest"):
        for n, kind, inc in includes(p):
            if inc.startswith(("tbb/", "oneapi/", "torch/", "ATen/", "c10/", "boost/", "hdf5",
                               "H5")):
                bad(p, n, inc, "ingest needs only the core, OpenCV and zlib")
            if kind == '"' and inc in tools_headers | trainer_headers:
                bad(p, n, inc, "ingest depends on nothing above it")
    for p in sources(root, "trainer"):
        for n, kind, inc in includes(p):
            if kind == '"' and (inc in tools_headers or "tools/" in inc):
                bad(p, n, inc, "nothing under trainer/ includes from tools/")
    for p in sources(root, "tools"):
        for n, kind, inc in includes(p):
            if kind == '"' and (inc in trainer_headers or "trainer/" in inc):
                bad(p, n, inc, "tools/ does not include the trainer")
    for p in sources(root, "python"):
        for n, kind, inc in includes(p):
            std = kind == "<" and "/" not in inc and "." not in inc
            public_api = inc.startswith("dscache/") and not inc.startswith("dscache/ingest/")
            if not (std or public_api or inc.startswith("pybind11/")):
                bad(p, n, inc, "the Python binding includes only public dscache/ headers, "
                    "pybind11 and the standard library")
    fuzz_local = {p.name for p in (root / "tests/fuzz").glob("*.h")} | {SHARED_TEMP_DIR}
    for p in sources(root, "tests/fuzz") if (root / "tests/fuzz").is_dir() else []:
        for n, kind, inc in includes(p):
            if kind == '"' and not (inc.startswith("dscache/") or inc in fuzz_local):
                bad(p, n, inc, "fuzz targets include only public dscache headers")
            if inc.startswith(THIRD_PARTY) or inc.startswith("doctest"):
                bad(p, n, inc, "fuzz targets need no third-party header")
    temp_dir = root / "tests/temp_dir.h"
    for n, kind, inc in includes(temp_dir) if temp_dir.is_file() else []:
        if kind == '"' or inc.startswith(THIRD_PARTY) or inc.startswith("doctest"):
            bad(temp_dir, n, inc, "the tests' shared temp dir (fuzz targets include it) needs "
                "only the standard library and POSIX")
    for mb in sorted(root.rglob("meson.build")):
        rel = mb.relative_to(root)
        if rel.parts[0] in ("tools", "build") or rel.parts[0].startswith((".", "build")):
            continue
        for n, line in enumerate(mb.read_text().splitlines(), 1):
            if re.search(r"['\"](\.\./)+tools/[^'\"]+\.(cpp|cc)['\"]", line):
                errors.append(f"{rel}:{n}: compiles a source of tools/: {line.strip()}")
    if not public or not tools_headers:
        errors.append(f"{root}: found no public headers or no tools/ headers: wrong root?")
    for e in errors:
        print(e)
    print(f"{'FAIL' if errors else 'PASS'} layering ({len(public)} public headers, "
          f"{len(errors)} violations)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
