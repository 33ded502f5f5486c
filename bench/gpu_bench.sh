#!/usr/bin/env bash
# The GPU run in one command, on a machine with PyTorch 2.x (its LibTorch), a C++ compiler, meson
# and ninja, from a checkout that carries the folder scripts/gpu-bundle made:
#   1. compiles Boost.Program_options from the bundle's sources with this machine's compiler and
#      the C++ ABI of its LibTorch (torch._C._GLIBCXX_USE_CXX11_ABI);
#   2. configures with -Dtorch_dir=<torch's folder> -Dtools=disabled (no OpenCV, HDF5 or JPEG
#      needed) and builds dscache-train and h2d_copy;
#   3. trains resnet18 at batch 256 on the bundle's photos64 cache for --steps optimizer steps
#      in fp32, fp16 (+ dynamic loss scaling) and bf16: samples/s (mean of the step lines after
#      the first, which holds the warm-up), data wait (the epoch line); then measures the
#      host-to-device copy rate of Loader batches from pinned vs pageable buffers (h2d_copy);
#   4. writes everything to OUT/gpu_bench.json (and the logs beside it).
# Usage: bash bench/gpu_bench.sh BUNDLE [--out DIR] [--device cuda|cpu] [--steps 60]
#                                [--batch 256] [--cache photos64] [--precisions fp32,fp16,bf16]
# Env: TORCH_DIR, TORCH_ABI override what python3's torch says; JOBS (default: all cores).
# --device cpu is for trying it without a GPU (tests/trainer/test_gpu_bundle.sh): fp16 is then
# skipped (CUDA only) and h2d_copy reports that nothing was measured.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 1 && -d $1 ]] || { echo "usage: bash bench/gpu_bench.sh BUNDLE [options]" >&2; exit 2; }
bundle=$(cd "$1" && pwd)
shift
out=gpu-bench-out device=cuda steps=60 batch=256 cache=photos64 precisions=fp32,fp16,bf16
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2 ;; --device) device=$2 ;; --steps) steps=$2 ;; --batch) batch=$2 ;;
    --cache) cache=$2 ;; --precisions) precisions=$2 ;;
    *) echo "gpu_bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/work
mkdir -p "$work"
log() { echo "gpu_bench: $*" >&2; }

torch_dir=${TORCH_DIR:-$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')}
abi=${TORCH_ABI:-$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')}
jobs=${JOBS:-$(nproc)}
log "LibTorch $torch_dir, C++11 ABI $abi, $jobs jobs"

# 1. Boost.Program_options, as a static library.
boost=$work/boost
if [[ ! -f $boost/lib/libboost_program_options.a ]]; then
  mkdir -p "$boost/lib" "$work/po"
  ln -sfn "$bundle/include" "$boost/include"
  for f in "$bundle"/boost-po-src/*.cpp; do
    c++ -std=c++17 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI="$abi" -I"$bundle/include" \
      -c "$f" -o "$work/po/$(basename "${f%.cpp}").o" &
  done
  wait
  ar rcs "$boost/lib/libboost_program_options.a" "$work"/po/*.o
fi

# 2. Configure and build the trainer (and h2d_copy) only.
if [[ ! -f $work/build/build.ninja ]]; then
  BOOST_ROOT=$boost meson setup "$work/build" "$src" --buildtype=release \
    -Dtorch_dir="$torch_dir" -Dtools=disabled -Dingest=disabled -Dhdf5=disabled -Djpeg=disabled \
    -Dtests=disabled -Dtrainer=enabled \
    -Dcpp_args="-I$bundle/include -D_GLIBCXX_USE_CXX11_ABI=$abi" >"$out/setup.log" 2>&1 ||
    { tail -n 30 "$out/setup.log"; log "configure failed (log: $out/setup.log)"; exit 1; }
fi
ninja -C "$work/build" -j "$jobs" trainer/dscache-train trainer/h2d_copy >"$out/build.log" 2>&1 ||
  { tail -n 30 "$out/build.log"; log "build failed (log: $out/build.log)"; exit 1; }
train=$work/build/trainer/dscache-train

# 3. resnet18 in each precision.
data=$bundle/caches/$cache
[[ -f $data/manifest.json ]] || { log "no cache $data in the bundle"; exit 1; }
rows=()
for p in ${precisions//,/ }; do
  if [[ $p == fp16 && $device != cuda ]]; then
    log "fp16 skipped: CUDA only"
    continue
  fi
  run=$work/run-$p
  rm -rf "$run"
  log "resnet18 $p, batch $batch, $steps steps on $device"
  "$train" --train "$data" --model resnet18 --batch "$batch" --precision "$p" --device "$device" \
    --max-steps "$steps" --log-every 1 --workers 4 --output "$run" --no-progress \
    >"$out/train-$p.log" 2>&1 || { tail -n 20 "$out/train-$p.log"; log "training $p failed"; exit 1; }
  rows+=("$p:$run/metrics.jsonl")
done

# 4. Host-to-device copies, then one JSON file.
"$work/build/trainer/h2d_copy" "$data" --batch "$batch" >"$out/h2d.json" 2>"$out/h2d.log" ||
  { cat "$out/h2d.log"; log "h2d_copy failed"; exit 1; }
python3 - "$out/gpu_bench.json" "$device" "$batch" "$steps" "$cache" "$torch_dir" "$out/h2d.json" \
  "${rows[@]}" <<'PY'
import json, subprocess, sys
path, device, batch, steps, cache, torch_dir, h2d = sys.argv[1:8]
result = {"device": device, "batch": int(batch), "steps": int(steps), "cache": cache,
          "model": "resnet18", "torch_dir": torch_dir, "runs": {}}
try:
    import torch
    result["torch"] = torch.__version__
    result["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
except Exception as e:  # noqa: BLE001 - the JSON says what could not be read
    result["torch"] = f"unavailable: {e}"
for arg in sys.argv[8:]:
    precision, metrics = arg.split(":", 1)
    lines = [json.loads(l) for l in open(metrics)]
    step = [l for l in lines if l.get("kind") == "step"]
    epoch = [l for l in lines if l.get("kind") == "epoch"]
    rates = [l["samples_per_s"] for l in step[1:]] or [l["samples_per_s"] for l in step]
    result["runs"][precision] = {
        "samples_per_s": sum(rates) / len(rates),
        "steps_measured": len(rates),
        "data_wait": epoch[-1]["data_wait"] if epoch else None,
        "final_loss": step[-1]["loss"] if step else None,
        "loss_scale": step[-1].get("scale") if step else None,
    }
result["h2d"] = json.load(open(h2d))
json.dump(result, open(path, "w"), indent=2)
print(json.dumps(result, indent=2))
PY
log "wrote $out/gpu_bench.json"
