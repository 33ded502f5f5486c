#!/usr/bin/env bash
# `pip install --no-build-isolation --no-index` of the source tree (pyproject.toml, meson-python)
# into a fresh venv made with --system-site-packages: the installed package imports from another
# directory, writes a cache with dscache.Writer and serves its pixels with dscache.Loader, with
# nothing from a build tree on its paths; `pip wheel` makes one wheel holding exactly the package
# (extension, .py files, stubs, py.typed) and the dscache command.
# Args: SOURCE_ROOT VERSION WITH_CLI (1: the dscache command must be in the wheel and on PATH)
# SKIPs (77) only where meson-python or venv is not installed (scripts/setup-deps installs both).
set -euo pipefail
src=$1 version=$2 with_cli=$3
py=/usr/bin/python3

$py -c 'import mesonpy' 2>/dev/null ||
  { echo "SKIP: meson-python is not installed (python3-mesonpy; scripts/setup-deps)"; exit 77; }
$py -c 'import ensurepip, venv' 2>/dev/null ||
  { echo "SKIP: venv cannot install pip (python3-venv; scripts/setup-deps)"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# pip builds in the directory it is given, and meson-python 0.12 writes its native file and
# temporary build dir there: build a copy, without any meson build dir (a folder holding
# build.ninja) or earlier meson-python leftovers, so the developer's tree and build/ stay out.
mkdir "$tmp/src"
tar -C "$src" --exclude=.git --exclude-tag-all=build.ninja --exclude='.mesonpy-*' \
  --exclude=__pycache__ -cf - . | tar -C "$tmp/src" -xf -
[[ -f "$tmp/src/pyproject.toml" ]] || fail "pyproject.toml was not copied from $src"

# Only the venv's own pip, offline, with no user or site pip configuration, and no cache.
export PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
$py -m venv --system-site-packages "$tmp/venv"
venv_py=$tmp/venv/bin/python
pip=("$venv_py" -m pip)
jobs=(--config-settings=compile-args=-j${DSCACHE_JOBS:-2})

start=$SECONDS
"${pip[@]}" install --no-build-isolation --no-index "${jobs[@]}" "$tmp/src" >"$tmp/install.log" 2>&1 ||
  { tail -n 40 "$tmp/install.log"; fail "pip install of $tmp/src"; }
echo "pip install: $((SECONDS - start)) s"

mkdir "$tmp/elsewhere"
(cd "$tmp/elsewhere" && "$venv_py" - "$tmp/venv" "$version" "$tmp/c" <<'PY') || fail "installed package"
import importlib.metadata, os, sys
import numpy as np
import dscache

venv, version, path = sys.argv[1:]
pkg = os.path.dirname(dscache.__file__)
assert pkg.startswith(venv + os.sep), f"dscache imported from {pkg}, not the venv {venv}"
assert importlib.metadata.version("dscache") == version, importlib.metadata.version("dscache")
assert dscache.__version__ == version, (dscache.__version__, version)
for f in ("__init__.pyi", "py.typed"):
    assert os.path.isfile(os.path.join(pkg, f)), f"{f} not installed in {pkg}"
assert os.path.dirname(dscache._dscache.__file__) == pkg, dscache._dscache.__file__

rng = np.random.default_rng(7)
images = rng.integers(0, 256, size=(13, 6, 5, 3), dtype=np.uint8)
labels = [i % 3 for i in range(13)]
with dscache.Writer(path, shape=(6, 5, 3), classes=["a", "b", "c"], shard_size=6 * 5 * 3 * 4) as w:
    for img, label in zip(images, labels):
        w.write(img, label)
got, got_labels = [], []
for x, y in dscache.Loader(dscache.Cache(path), batch_size=4, shuffle=False):
    got.append(np.array(x))
    got_labels += np.array(y).tolist()
got = np.concatenate(got)
assert got.shape == images.shape, got.shape
assert np.array_equal(got, images), "served pixels differ from the written ones"
assert got_labels == labels, got_labels
print(f"served {len(got)} samples from {pkg}")
PY

if [[ $with_cli == 1 ]]; then
  [[ -x "$tmp/venv/bin/dscache" ]] || fail "the dscache command is not in the venv's bin/"
  out=$(cd "$tmp/elsewhere" && PATH="$tmp/venv/bin:$PATH" dscache inspect "$tmp/c")
  grep -q 13 <<<"$out" || { echo "$out"; fail "dscache inspect of the 13-sample cache"; }
  echo "dscache inspect from the venv: ok"
fi

start=$SECONDS
(cd "$tmp/src" && "${pip[@]}" wheel --no-build-isolation --no-index --no-deps "${jobs[@]}" \
  -w "$tmp/wheels" . >"$tmp/wheel.log" 2>&1) || { tail -n 40 "$tmp/wheel.log"; fail "pip wheel"; }
echo "pip wheel: $((SECONDS - start)) s"
$py - "$tmp/wheels" "$src/python/dscache" "$version" "$with_cli" <<'PY' || fail "wheel contents"
import glob, os, sys, zipfile

wheels, pkg_src, version, with_cli = sys.argv[1:]
found = glob.glob(os.path.join(wheels, "*.whl"))
assert len(found) == 1, f"want one wheel, found {found}"
names = zipfile.ZipFile(found[0]).namelist()
# Every .py, the stubs and py.typed of python/dscache (a module missing from py_module_sources
# in python/dscache/meson.build would be missing here), the extension, and nothing for C++
# consumers: no headers, static or shared libdscache, .pc files or bundled .mesonpy.libs.
want = {f"dscache/{f}" for f in os.listdir(pkg_src)
        if f.endswith((".py", ".pyi")) or f == "py.typed"}
missing = want - set(names)
assert not missing, f"not in the wheel: {sorted(missing)}"
assert [n for n in names if n.startswith("dscache/_dscache.") and n.endswith(".so")], names
info = f"dscache-{version}.dist-info/"
scripts = [f"dscache-{version}.data/scripts/dscache"] if with_cli == "1" else []
extra = [n for n in names if n not in want and not n.startswith((info, "dscache/_dscache."))
         and n not in scripts]
assert not extra, f"unexpected files in the wheel: {extra}"
assert all(s in names for s in scripts), f"{scripts} not in the wheel"
print(f"{os.path.basename(found[0])}: {len(names)} files")
PY
echo "PASS"
