#!/usr/bin/python3
"""dscache.models' PyTorch mirrors against dscache-train's own models (trainer/models.h).

model_mirrors: for resnet18 (both stems, classifier and segmenter) and the older cnn and
unet-small mirrors, tests/trainer/model_forward builds the model with the trainer's make_model
from a seed, gives its normalization layers non-trivial statistics, and saves model.pt with the
trainer's save_model. The mirror must draw the same initial weights from the same seed, load
model.pt through load_model (strict: every name and shape), and give the trainer's outputs on the
same input, in eval mode (BatchNorm's running statistics) and in train mode (the batch's), within
a bound derived from fp32 rounding.

model_resnet18_run: four epochs of `dscache-train --model resnet18` on a real cache; load_model
on the run directory reproduces the run's val_acc and val_loss.

Needs Debian's python3-torch (exit 77 without it). Env: DSCACHE, DSCACHE_TRAIN and
DSCACHE_MODEL_FORWARD; registered by trainer/meson.build.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from cli_helpers import Skip, build, check, check_eq, load_images, load_labels, main
from test_model_export import make_folder, need_torch, need_trainer

DSCACHE_TRAIN = os.environ.get("DSCACHE_TRAIN", "")
MODEL_FORWARD = os.environ.get("DSCACHE_MODEL_FORWARD", "")
SOURCE_ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))

# (kind, task, in_channels, outputs, height, width, seed). Sides <= 64 take ResNet-18's CIFAR
# stem, larger ones the ImageNet stem; odd sides check every upsampling's target size.
CONFIGS = [
    ("resnet18", "classify", 3, 5, 16, 16, 1),
    ("resnet18", "classify", 1, 3, 72, 80, 2),
    ("resnet18", "segment", 3, 4, 24, 20, 3),
    ("resnet18", "segment", 1, 3, 70, 66, 4),
    ("resnet18", "segment", 3, 2, 9, 13, 5),
    ("cnn", "classify", 3, 4, 20, 18, 6),
    ("unet-small", "segment", 1, 3, 24, 21, 7),
]


def load_models_module():
    """python/dscache/models.py from the source tree (it imports only torch)."""
    spec = importlib.util.spec_from_file_location(
        "dscache_models", SOURCE_ROOT / "python" / "dscache" / "models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    return models


def fp32_bound(torch, y):
    """How far two fp32 evaluations of the same network on the same input may be apart when
    only their rounding differs (another summation order in a convolution, a fused kernel): a
    dot product of n terms rounded in another order moves by at most about n * 2^-24 of the sum
    of its terms' magnitudes, typically sqrt(n) * 2^-24 (rounding errors are unbiased). The
    largest reduction here has 3*3*512 = 4608 terms and ResNet-18 has ~20 layers that carry such
    differences forward about unamplified (BatchNorm rescales by O(1)): worst case 4608 * 20 *
    2^-24 ~ 5e-3, typical sqrt(4608 * 20) * 2^-24 ~ 2e-5 of the output's magnitude. The bound,
    1e-4 * max(|y|, 1), is 5x the typical and far below what a wrong layer does (a swapped mean
    and variance, a missed ReLU, the other stem or upsampling move outputs by O(|y|)). With the
    same LibTorch under both (Debian's 1.13.1) the outputs are in fact bit-identical."""
    return 1e-4 * max(float(y.abs().max()), 1.0)


def compare(torch, got, want, what):
    check_eq(tuple(got.shape), tuple(want.shape), f"{what}: output shape")
    diff = float((got - want).abs().max())
    bound = fp32_bound(torch, want)
    print(f"{what}: max |mirror - trainer| {diff:.3g} (bound {bound:.3g}, max |y| "
          f"{float(want.abs().max()):.3g})")
    check(diff <= bound, f"{what}: the mirror's outputs differ by {diff} > {bound}")


def case_mirror_outputs(tmp):
    torch = need_torch()
    if not MODEL_FORWARD or not os.access(MODEL_FORWARD, os.X_OK):
        raise Skip("DSCACHE_MODEL_FORWARD is not set to tests/trainer/model_forward (not built)")
    torch.set_num_threads(1)
    models = load_models_module()
    for kind, task, c, k, h, w, seed in CONFIGS:
        what = f"{kind} {task} {c}x{h}x{w} -> {k}"
        d = tmp / f"{kind}-{task}-{h}x{w}"
        d.mkdir()
        subprocess.run([MODEL_FORWARD, kind, task, str(c), str(k), str(h), str(w), str(seed),
                        str(d)], check=True, timeout=120)
        # The same seed draws the same initial weights (the trainer's init, in its order).
        torch.manual_seed(seed)
        fresh = models.build_model(kind, task, c, k, h, w)
        init = {n: v for n, v in torch.jit.load(str(d / "init.pt")).state_dict().items()
                if not n.startswith("dscache_")}
        mine = fresh.state_dict()
        check_eq(sorted(mine), sorted(init), f"{what}: state_dict names")
        for n, v in init.items():
            check_eq(tuple(mine[n].shape), tuple(v.shape), f"{what}: {n} shape")
            check(torch.equal(mine[n], v), f"{what}: {n} initial values differ from the trainer's")
        # model.pt through load_model, as a user loads a run.
        card = {"format": "dscache-model/1", "model": kind, "task": task, "in_channels": c,
                "outputs": k, "height": h, "width": w}
        (d / "model.json").write_text(json.dumps(card))
        model, _ = models.load_model(d)
        x = torch.from_numpy(np.fromfile(d / "x.f32", np.float32).reshape(2, c, h, w))
        shape = (2, k) if task != "segment" else (2, k, h, w)
        with torch.no_grad():
            got = model(x)
            compare(torch, got, torch.from_numpy(
                np.fromfile(d / "eval.f32", np.float32).reshape(shape)), f"{what}, eval")
            model.train()
            got = model(x)
            compare(torch, got, torch.from_numpy(
                np.fromfile(d / "train.f32", np.float32).reshape(shape)), f"{what}, train")


def case_resnet18_run(tmp):
    """Four epochs of resnet18 on a 2-class cache: load_model reproduces the run's validation."""
    torch = need_torch()
    need_trainer()
    torch.set_num_threads(1)
    for name, per_class, seed in (("train", 32, 1), ("val", 16, 2)):
        make_folder(tmp / f"{name}_src", per_class, seed)
        build(tmp / f"{name}_src", tmp / name, "--size", "16")
    out = tmp / "out"
    # 32 steps at a gentle rate: BatchNorm's running statistics (momentum 0.1) settle enough
    # that eval mode predicts something, so the comparison is not of two saturated outputs.
    cmd = [DSCACHE_TRAIN, "--train", tmp / "train", "--val", tmp / "val", "--model", "resnet18",
           "--epochs", "4", "--batch", "8", "--lr", "0.01", "--threads", "1", "--seed", "1",
           "--precision", "fp32", "--no-progress", "--output", out]
    p = subprocess.run([str(a) for a in cmd], capture_output=True, text=True, timeout=600)
    check_eq(p.returncode, 0, f"dscache-train exit ({p.stderr})")
    models = load_models_module()
    model, card = models.load_model(out)
    check_eq((card["model"], card["task"]), ("resnet18", "classify"), "model.json's model, task")
    check(isinstance(model, models.ResNet18) and model.small_input, "a CIFAR-stem ResNet18")
    labels = load_labels(tmp / "val")
    with torch.no_grad():
        logits = model(models.normalize(load_images(tmp / "val"), card))
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels)).item()
    correct = int((logits.argmax(1).numpy() == labels).sum())
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [m for m in epochs if m["kind"] == "epoch"][-1]
    print(f"mirror: {correct}/{len(labels)} right, loss {loss:.6f}; the run: val_acc "
          f"{last['val_acc']:.4f}, val_loss {last['val_loss']:.6f}")
    check(abs(correct - last["val_acc"] * len(labels)) <= 0.5,
          f"the mirror gets {correct}/{len(labels)} right, the run's val_acc {last['val_acc']}")
    # Both are fp32 means of the same logits' cross entropy (the run's over batches of 8).
    check(abs(loss - last["val_loss"]) <= 1e-5 * max(1.0, last["val_loss"]),
          f"the mirror's mean cross entropy {loss} != the run's val_loss {last['val_loss']}")


CASES = {"model_mirrors": case_mirror_outputs, "model_resnet18_run": case_resnet18_run}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
