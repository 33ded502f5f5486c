#!/usr/bin/env bash
# `meson install` puts the Python package dscache (the extension, __init__.py, _errors.py, the
# stubs and py.typed) into site-packages, and the installed copy imports and serves a real cache
# with nothing from the build tree on its paths.
# Args: BUILD_DIR DSCACHE_BINARY SOURCE_ROOT
set -euo pipefail
build=$1 dscache=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --destdir "$tmp/root" --quiet >/dev/null
init=$(find "$tmp/root" -path '*/dscache/__init__.py' | head -n 1)
[[ -n "$init" ]] || { echo "FAIL: dscache/__init__.py was not installed"; exit 1; }
pkg=$(dirname "$init")
for f in __init__.pyi _errors.py py.typed torch.py torch.pyi; do
  [[ -f "$pkg/$f" ]] || { echo "FAIL: dscache/$f not installed next to __init__.py"; exit 1; }
done
ls "$pkg"/_dscache.*.so >/dev/null 2>&1 || { echo "FAIL: the extension is not in $pkg"; exit 1; }
case "$pkg" in
  */site-packages/dscache|*/dist-packages/dscache) ;;
  *) echo "FAIL: installed to $pkg, not a site-packages/dist-packages dir"; exit 1 ;;
esac
libdir=$(dirname "$(find "$tmp/root" -name 'libdscache.so*' | head -n 1)")

/usr/bin/python3 "$src/tests/write_pngs.py" "$tmp/src" 2 6 20 24 1
"$dscache" build "$tmp/src" "$tmp/cache" --size 16 --quiet >/dev/null
# The installed library lives under the staging root, not the prefix the rpath names.
out=$(cd "$tmp" && env -u PYTHONPATH LD_LIBRARY_PATH="$libdir" \
  PYTHONPATH="$(dirname "$pkg")" /usr/bin/python3 -c '
import sys, dscache
assert dscache.__file__.startswith(sys.argv[1]), dscache.__file__
n = sum(len(y) for _, y in dscache.Loader(dscache.Cache(sys.argv[2]), batch_size=5))
print(f"{n} samples from {dscache.__file__}")
' "$tmp/root" "$tmp/cache")
echo "$out"
[[ "$out" == "12 samples from "* ]] || { echo "FAIL: unexpected output"; exit 1; }
echo "PASS"
