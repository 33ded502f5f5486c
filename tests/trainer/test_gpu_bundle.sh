#!/usr/bin/env bash
# scripts/gpu-bundle and bench/gpu_bench.sh, tried here as the GPU machine would run them but on
# the CPU: the bundle is made (without photographs), then gpu_bench.sh compiles
# Boost.Program_options from the bundle's sources, configures against a LibTorch tree
# (-Dtorch_dir: the system LibTorch seen through links, as test_torch_dir.sh does) with the tools
# disabled, builds, trains resnet18 for 2 steps in fp32 and bf16 and writes gpu_bench.json.
# Args: SOURCE_ROOT BUILD_DIR (holding tools/dscache)
set -euo pipefail
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/tests/trainer/torch_tree.sh"
torch_tree "$tmp/torch"

cd "$tmp"
DSCACHE_BUILD=$build "$src/scripts/gpu-bundle" "$tmp/bundle" --count 0 >"$tmp/bundle.log" 2>&1 ||
  { cat "$tmp/bundle.log"; echo "FAIL: gpu-bundle"; exit 1; }
size=$(du -sb "$tmp/bundle" | cut -f1)
(( size < 60 * 1024 * 1024 )) || { echo "FAIL: bundle is $size bytes"; exit 1; }
[[ -f $tmp/bundle/include/boost/program_options.hpp && -f $tmp/bundle/include/nlohmann/json.hpp ]] ||
  { echo "FAIL: headers missing from the bundle"; exit 1; }
[[ -f $tmp/bundle/caches/fashion-t10k/manifest.json ]] || { echo "FAIL: no fashion-t10k cache"; exit 1; }

TORCH_DIR=$tmp/torch TORCH_ABI=1 JOBS=${DSCACHE_JOBS:-2} bash "$src/bench/gpu_bench.sh" "$tmp/bundle" \
  --out "$tmp/out" --device cpu --steps 2 --batch 8 --cache fashion-t10k >"$tmp/bench.log" 2>&1 ||
  { tail -n 40 "$tmp/bench.log"; echo "FAIL: gpu_bench.sh"; exit 1; }
/usr/bin/python3 - "$tmp/out/gpu_bench.json" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
assert j["model"] == "resnet18" and j["device"] == "cpu", j
assert sorted(j["runs"]) == ["bf16", "fp32"], j["runs"]  # fp16 is CUDA only
for p, r in j["runs"].items():
    assert r["samples_per_s"] > 0 and r["steps_measured"] >= 1, (p, r)
    assert r["final_loss"] == r["final_loss"] and r["final_loss"] > 0, (p, r)
assert j["h2d"]["cuda"] is False, j["h2d"]
PY
echo "OK"
