#!/usr/bin/python3
"""The dependency rules of docs/ARCHITECTURE.md, checked on the sources' #include lines.

Usage: check_layering.py SOURCE_ROOT     Exit 0 = every rule holds, 1 = a rule is broken (each
violation printed as FILE:LINE: the include and the rule it breaks).

- Public headers (libcache/include/dscache/, .../ingest/) include only the C++ standard library,
  POSIX headers and other dscache public headers: no third-party type can reach a user.
- libcache's core (src/) includes no OpenCV, TBB, LibTorch or Boost, and nothing of ingest,
  tools or the trainer. libjpeg (<jpeglib.h>, <jerror.h>) only in the files that wrap it
  (feature `jpeg`): libcache/src/codec/jpeg.cpp (decode), jpeg_encode.cpp and their shared
  jpeg_libjpeg.h; never TurboJPEG.
- libcache/src is split into subject folders, lowest first: util < json < format < codec <
  remote < read < write < serve (a subfolder, such as serve/mix/, is part of its folder).
  Every source lives in one of them; a private include names its folder (#include
  "read/mapped_file.h", relative to libcache/src), and a file includes private headers of its
  own folder or a lower one, never a higher one.
- The ingest library includes no TBB, LibTorch, HDF5 or Boost, and nothing of tools or trainer;
  of libcache/src only json/ (the JSON reader it shares with the manifest).
- Nothing under trainer/ includes a header of tools/, and tools/ none of trainer/.
- The Python binding (python/) includes only libcache's public headers (not ingest), pybind11,
  the C++ standard library and its own headers beside it (_binding.h, held to the same rule):
  it wraps the contract, it reaches into nothing. One exception: python/dscache/_shared_slots.cpp
  maps dscache.torch's shared-memory ring file read-write (the C++ Loader fills batches there)
  and may include the POSIX headers that takes (<fcntl.h>, <sys/mman.h>, <sys/stat.h>,
  <unistd.h>). Its Python files import only the standard
  library, NumPy and the package itself when they load; torch only inside a function (the
  calls that hand out tensors), nothing else anywhere. The exceptions are dscache/models.py,
  the PyTorch mirrors of the trainer's models (nn.Module subclasses need torch at load), and
  dscache/torch.py, the torch.utils.data datasets (subclasses of torch's Dataset classes),
  which no other file of the package imports: `import dscache` still never loads torch.
- Benchmarks (bench/) include dscache's public headers (ingest too), their own helpers
  (bench/*.h, held to the same rule), third-party and system headers, and, only in the files trainer/meson.build builds with the trainer (h2d_copy), the
  trainer's headers and LibTorch: never a header of tools/ or of libcache/src.
- Fuzz targets (tests/fuzz/) include only dscache public headers, their own helpers, the tests'
  shared temp dir (tests/temp_dir.h, itself standard library and POSIX only) and the standard
  library: they attack the contract a user's input meets, as a user links it.
- No meson.build outside tools/ compiles a source file that lives in tools/.
- Only tests/ (and libcache/, which declares it) use dscache_internal_dep: tools, the trainer,
  the Python module and the benchmarks link the public dscache_dep.
"""

import ast
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
THIRD_PARTY = ("opencv2/", "tbb/", "oneapi/", "torch/", "ATen/", "c10/", "boost/", "hdf5",
               "H5", "nlohmann/", "zlib.h", "gloo/", "turbojpeg.h", "jpeglib.h", "jerror.h")
LIBJPEG = ("jpeglib.h", "jerror.h", "jmorecfg.h", "jconfig.h")
JPEG_WRAPPERS = ("libcache/src/codec/jpeg.cpp", "libcache/src/codec/jpeg_encode.cpp",
                 "libcache/src/codec/jpeg_libjpeg.h")
SHARED_TEMP_DIR = "../temp_dir.h"  # tests/temp_dir.h, as tests/fuzz/ includes it
TORCH = ("torch/", "ATen/", "c10/")
PY_LOAD_OK = ("numpy",)   # what the Python package may import when it loads, besides the stdlib
PY_LAZY_OK = ("torch",)   # what it may import inside a function
# python/dscache/models.py and torch.py: torch at load, imported by no other file of the package.
PY_TORCH_MODULES = ("models", "torch")
# libcache/src's subject folders, lowest first (docs/ARCHITECTURE.md, "Folders").
CORE_FOLDERS = ("util", "json", "format", "codec", "remote", "read", "write", "serve")


def includes(path):
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield n, m.group(1), m.group(2)


# The binding's one file that maps a file read-write (dscache.torch's ring), and what it includes.
SHARED_SLOTS_FILE = "python/dscache/_shared_slots.cpp"
SHARED_SLOTS_POSIX = {"fcntl.h", "sys/mman.h", "sys/stat.h", "unistd.h"}


def python_imports(path):
    """(line, module, inside a function) of each import; relative imports start with '.'."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append((child.lineno, "." * child.level + (child.module or ""),
                              in_function))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def sources(root, sub):
    d = root / sub
    return sorted(p for p in d.rglob("*") if p.suffix in (".h", ".hpp", ".cpp", ".cc"))


def check_python_imports(root, errors):
    """The Python package imports the standard library and NumPy at load, torch in a function."""
    for p in sorted((root / "python").rglob("*.py")) if (root / "python").is_dir() else []:
        for n, name, in_function in python_imports(p):
            top = name.split(".")[0]
            torch_module = next((m for m in PY_TORCH_MODULES if name == "dscache." + m or (
                name.startswith(".") and (name.lstrip(".") == m or name.endswith("." + m))) or (
                    m == "models" and name == m)), None)  # bare "torch" is torch itself
            if torch_module is not None:
                errors.append(f"{p.relative_to(root)}:{n}: import {name}: dscache/"
                              f"{torch_module}.py loads torch; nothing in the package imports it")
                continue
            if name.startswith("."):
                continue
            if p.stem in PY_TORCH_MODULES and p.parent.name == "dscache" and top in PY_LAZY_OK:
                continue
            if in_function and top in PY_LAZY_OK + PY_LOAD_OK:
                continue
            if not in_function and (top in sys.stdlib_module_names or top in PY_LOAD_OK):
                continue
            errors.append(f"{p.relative_to(root)}:{n}: import {name}: the Python package imports "
                          "only the standard library and NumPy when it loads, torch only inside "
                          "a function")


def check_meson_builds(root, errors):
    """No meson.build outside tools/ compiles its sources; only tests/ see the internals."""
    for mb in sorted(root.rglob("meson.build")):
        rel = mb.relative_to(root)
        if rel.parts[0] in ("tools", "build") or rel.parts[0].startswith((".", "build")):
            continue
        for n, line in enumerate(mb.read_text().splitlines(), 1):
            if re.search(r"['\"](\.\./)+tools/[^'\"]+\.(cpp|cc)['\"]", line):
                errors.append(f"{rel}:{n}: compiles a source of tools/: {line.strip()}")
    for mb in sorted(root.rglob("meson.build")):
        rel = mb.relative_to(root)
        if rel.parts[0] in ("libcache", "tests") or rel.parts[0].startswith((".", "build")):
            continue
        for n, line in enumerate(mb.read_text().splitlines(), 1):
            if "dscache_internal_dep" in line.split("#")[0]:
                errors.append(f"{rel}:{n}: uses dscache_internal_dep: only tests/ see libcache's "
                              f"internals; link dscache_dep")


def check_core_folders(root, errors):
    """libcache/src's folders: each file in one, includes folder-qualified, none upward."""
    src = root / "libcache/src"
    rank = {f: i for i, f in enumerate(CORE_FOLDERS)}
    order = " < ".join(CORE_FOLDERS)
    for d in sorted(d for d in src.iterdir() if d.is_dir()) if src.is_dir() else []:
        if d.name not in rank:
            errors.append(f"{d.relative_to(root)}/: a folder of libcache/src that the layering "
                          f"order ({order}) does not name")
    for p in sources(root, "libcache/src"):
        rel = p.relative_to(src)
        folder = rel.parts[0] if len(rel.parts) > 1 else None
        if folder is None:
            errors.append(f"{p.relative_to(root)}: every source of libcache/src lives in a "
                          f"subject folder ({order})")
        for n, kind, inc in includes(p):
            if kind != '"' or inc.startswith("dscache/"):
                continue
            top = inc.split("/")[0]
            where = f"{p.relative_to(root)}:{n}: #include {inc}"
            if "/" not in inc or not (src / inc).is_file():
                errors.append(f"{where}: a private include names its folder, relative to "
                              "libcache/src (e.g. read/mapped_file.h)")
            elif folder in rank and top in rank and rank[top] > rank[folder]:
                errors.append(f"{where}: {folder}/ is below {top}/ ({order}): a lower folder "
                              "never includes a higher one")


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
            if inc in LIBJPEG and p.relative_to(root).as_posix() not in JPEG_WRAPPERS:
                bad(p, n, inc, f"libjpeg is included only by {', '.join(JPEG_WRAPPERS)}")
    check_core_folders(root, errors)
    for p in sources(root, "libcache/ingest"):
        for n, kind, inc in includes(p):
            if inc.startswith(("tbb/", "oneapi/", "torch/", "ATen/", "c10/", "boost/", "hdf5",
                               "H5")):
                bad(p, n, inc, "ingest needs only the core, OpenCV and zlib")
            if kind == '"' and inc in tools_headers | trainer_headers:
                bad(p, n, inc, "ingest depends on nothing above it")
            if kind == '"' and (root / "libcache/src" / inc).is_file() and \
                    not inc.startswith("json/"):
                bad(p, n, inc, "ingest uses libcache/src's json/ only: the core's public headers "
                    "are its contract")
    for p in sources(root, "trainer"):
        for n, kind, inc in includes(p):
            if kind == '"' and (inc in tools_headers or "tools/" in inc):
                bad(p, n, inc, "nothing under trainer/ includes from tools/")
    for p in sources(root, "tools"):
        for n, kind, inc in includes(p):
            if kind == '"' and (inc in trainer_headers or "trainer/" in inc):
                bad(p, n, inc, "tools/ does not include the trainer")
    for p in sources(root, "python"):
        own = {h.name for h in p.parent.glob("*.h")}  # the extension's own headers (_binding.h)
        for n, kind, inc in includes(p):
            std = kind == "<" and "/" not in inc and "." not in inc
            public_api = inc.startswith("dscache/") and not inc.startswith("dscache/ingest/")
            local = kind == '"' and inc in own
            posix = kind == "<" and inc in SHARED_SLOTS_POSIX and \
                p.relative_to(root).as_posix() == SHARED_SLOTS_FILE
            if not (std or public_api or local or posix or inc.startswith("pybind11/")):
                bad(p, n, inc, "the Python binding includes only public dscache/ headers, "
                    "pybind11 and the standard library")
    check_python_imports(root, errors)
    internal_headers = {h.relative_to(root / "libcache/src").as_posix()
                        for h in (root / "libcache/src").rglob("*.h")}
    trainer_mb = root / "trainer/meson.build"
    with_trainer = set(re.findall(r"\.\./bench/([\w.]+\.cpp)",
                                  trainer_mb.read_text() if trainer_mb.is_file() else ""))
    bench_local = {p.name for p in (root / "bench").glob("*.h")}
    for p in sources(root, "bench") if (root / "bench").is_dir() else []:
        linked_with_trainer = p.name in with_trainer
        for n, kind, inc in includes(p):
            if inc.startswith(TORCH) and not linked_with_trainer:
                bad(p, n, inc, "LibTorch only in a benchmark trainer/meson.build builds with the "
                    "trainer")
            if kind != '"' or inc.startswith("dscache/") or inc in bench_local:
                continue
            if inc in tools_headers or "tools/" in inc:
                bad(p, n, inc, "bench/ does not include tools/ (it runs the dscache binary)")
            elif inc in internal_headers or "src/" in inc:
                bad(p, n, inc, "bench/ uses libcache's public headers, not its internals")
            elif inc not in trainer_headers:
                bad(p, n, inc, "bench/ includes only dscache public headers (and the trainer's)")
            elif not linked_with_trainer:
                bad(p, n, inc, "only a benchmark trainer/meson.build builds with the trainer "
                    "includes the trainer's headers")
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
    check_meson_builds(root, errors)
    if not public or not tools_headers:
        errors.append(f"{root}: found no public headers or no tools/ headers: wrong root?")
    for e in errors:
        print(e)
    print(f"{'FAIL' if errors else 'PASS'} layering ({len(public)} public headers, "
          f"{len(errors)} violations)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
