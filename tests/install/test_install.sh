#!/usr/bin/env bash
# `meson install` puts the headers, the library and dscache.pc in place, and a program built
# only through pkg-config against them serves a real cache.
# Args: BUILD_DIR DSCACHE_BINARY SOURCE_ROOT
set -euo pipefail
build=$1 dscache=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --destdir "$tmp/root" --quiet >/dev/null
pc=$(find "$tmp/root" -name dscache.pc | head -n 1)
[[ -n "$pc" ]] || { echo "FAIL: dscache.pc was not installed"; exit 1; }
for h in cache.h loader.h error.h manifest.h; do
  [[ -n $(find "$tmp/root" -path "*/include/dscache/$h") ]] || { echo "FAIL: dscache/$h not installed"; exit 1; }
done
# The .pc file names the real prefix; the sysroot maps it into the staging directory.
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$tmp/root"
flags=$(pkg-config --cflags --libs dscache)
libdir=$(pkg-config --variable=libdir dscache)  # already under the sysroot
# The installed headers must not need anything but the standard library.
c++ -std=c++17 -Wall -Werror "$src/docs/example.cpp" $flags -o "$tmp/example"

# A real cache: 40 PNGs in 4 classes.
/usr/bin/python3 "$src/tests/write_pngs.py" "$tmp/src" 4 10 20 24 1
"$dscache" build "$tmp/src" "$tmp/cache" --size 16 --quiet >/dev/null
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/example" "$tmp/cache")
echo "$out"
# 40 samples per epoch; labels 0..3, 10 each: sum 60.
[[ $(grep -c "40 samples, label sum 60" <<<"$out") -eq 2 ]] || { echo "FAIL: unexpected output"; exit 1; }
echo "OK"
