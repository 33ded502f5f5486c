#!/usr/bin/env bash
# -Dtorch_dir: dscache-train builds against a LibTorch tree given by path (the layout of a
# PyTorch wheel's torch/ folder: include/, lib/, share/cmake/Torch/), runs from it through its
# RUNPATH, and a tree built with the old C++ ABI is refused at configure time unless the whole
# build asks for that ABI. The tree here is the system LibTorch seen through symbolic links.
# Args: SOURCE_ROOT CACHE_BUILDER(dscache)
set -euo pipefail
src=$1 dscache=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/tests/trainer/torch_tree.sh"  # $config, $libdir, torch_tree
[[ -e "$libdir/libtorch_cpu.so" ]] || { echo "FAIL: no libtorch_cpu.so in $libdir"; exit 1; }
torch_tree "$tmp/torch" 1
torch_tree "$tmp/torch-old-abi" 0

opts=(-Dtests=disabled -Dtools=disabled -Dhdf5=disabled)
meson setup "$tmp/build" "$src" "${opts[@]}" -Dtorch_dir="$tmp/torch" >"$tmp/setup.log" 2>&1 ||
  { cat "$tmp/setup.log"; echo "FAIL: configure with torch_dir"; exit 1; }
grep -q "LibTorch *: $tmp/torch" "$tmp/setup.log" || { cat "$tmp/setup.log"; echo "FAIL: summary"; exit 1; }
ninja -C "$tmp/build" -j "${DSCACHE_JOBS:-2}" trainer/dscache-train >"$tmp/build.log" 2>&1 ||
  { tail -n 30 "$tmp/build.log"; echo "FAIL: build with torch_dir"; exit 1; }
exe="$tmp/build/trainer/dscache-train"
readelf -d "$exe" | grep -q "R.*PATH.*$tmp/torch/lib" || { echo "FAIL: no RUNPATH to $tmp/torch/lib"; exit 1; }

# It trains: 30 samples of 8x8 in 3 classes, built by dscache, 4 optimizer steps.
/usr/bin/python3 "$src/tests/write_pngs.py" "$tmp/src" 3 10 8 8 2
"$dscache" build "$tmp/src" "$tmp/cache" --size 8 --quiet >/dev/null
"$exe" --train "$tmp/cache" --batch 8 --epochs 1 --threads 1 --output "$tmp/out" --log-every 1 \
  --no-progress >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; echo "FAIL: training"; exit 1; }
[[ $(grep -c '"kind":"step"' "$tmp/out/metrics.jsonl") -eq 4 ]] || { echo "FAIL: 4 step lines"; exit 1; }

# The old ABI: refused, naming the way out; accepted when the build asks for it.
if meson setup "$tmp/build-old" "$src" "${opts[@]}" -Dtorch_dir="$tmp/torch-old-abi" >"$tmp/old.log" 2>&1; then
  echo "FAIL: a pre-C++11-ABI LibTorch was accepted"; exit 1
fi
grep -q "_GLIBCXX_USE_CXX11_ABI=0; build the whole project with" "$tmp/old.log" ||
  { cat "$tmp/old.log"; echo "FAIL: ABI message"; exit 1; }
meson setup "$tmp/build-old2" "$src" "${opts[@]}" -Dtorch_dir="$tmp/torch-old-abi" \
  -Dcpp_args=-D_GLIBCXX_USE_CXX11_ABI=0 >"$tmp/old2.log" 2>&1 ||
  { cat "$tmp/old2.log"; echo "FAIL: the old ABI asked for explicitly was refused"; exit 1; }
# Not a LibTorch tree at all.
if meson setup "$tmp/build-none" "$src" "${opts[@]}" -Dtorch_dir="$tmp/nowhere" >"$tmp/none.log" 2>&1; then
  echo "FAIL: a missing torch_dir was accepted"; exit 1
fi
grep -q "not a LibTorch tree" "$tmp/none.log" || { cat "$tmp/none.log"; echo "FAIL: message"; exit 1; }
echo "OK"
