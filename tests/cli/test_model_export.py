#!/usr/bin/python3
"""dscache-train's OUTPUT/model.pt and OUTPUT/model.json, used for inference the way docs/TRAINER.md
("Using model.pt for inference") says: torch.jit.load(model.pt).state_dict() into a plain PyTorch
mirror of the architecture model.json names, inputs normalized with model.json's statistics. The
mirror's predictions on the validation cache (read with numpy) must reproduce the run's val_acc
and val_loss, and docs/TRAINER.md's example, run as written, must predict the same classes.
Needs Debian's python3-torch (exit 77 without it). Env: DSCACHE (builds the caches) and
DSCACHE_TRAIN; registered by trainer/meson.build.
"""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from cli_helpers import (Skip, build, check, check_eq, load_images, load_labels, load_manifest,
                         main, write_img)

DSCACHE_TRAIN = os.environ.get("DSCACHE_TRAIN", "")
SOURCE_ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", Path(__file__).resolve().parents[2]))
CHECKPOINT_HEADER = 32  # checkpoint.pt's header before its LibTorch archive (trainer/checkpoint.h)


def need_torch():
    try:
        import torch
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")
    return torch


def need_trainer():
    if not DSCACHE_TRAIN or not os.access(DSCACHE_TRAIN, os.X_OK):
        raise Skip("DSCACHE_TRAIN is not set to a dscache-train binary (trainer not built)")


def make_folder(root, per_class, seed):
    """Two classes of 16x16 RGB noise, one brighter in its top half, one in its bottom half."""
    rng = np.random.default_rng(seed)
    for ci, cls in enumerate(["bright_top", "bright_bottom"]):
        for k in range(per_class):
            img = rng.integers(0, 150, (16, 16, 3), dtype=np.uint8)
            rows = slice(0, 8) if ci == 0 else slice(8, 16)
            img[rows] += np.uint8(rng.integers(4, 14))  # subtle: some val images are missed
            write_img(root / cls / f"{k:03d}.png", img)


def cnn_mirror(torch, c, outputs, h, w):
    """trainer/models.h's Cnn in plain PyTorch, with the same parameter names."""
    nn, F = torch.nn, torch.nn.functional

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(c, 32, 3, padding=1)
            self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
            self.fc1 = nn.Linear(64 * (h // 2 // 2) * (w // 2 // 2), 128)
            self.fc2 = nn.Linear(128, outputs)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return self.fc2(F.relu(self.fc1(x.flatten(1))))

    return Cnn()


def usage_snippet_predictions(out, val_shard):
    """Runs docs/TRAINER.md's Python inference example ("Using model.pt for inference") on OUT and
    VAL_SHARD in place of its run/ and val/ paths; returns the class names it prints."""
    text = (SOURCE_ROOT / "docs" / "TRAINER.md").read_text()
    at = text.index("### Using model.pt for inference")
    block = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    for path in ("run/model.json", "run/model.pt", "val/images-00000.npy"):
        check(f'"{path}"' in block, f"TRAINER.md's example no longer reads {path}")
    block = (block.replace('"run/', f'"{out}/')
             .replace('"val/images-00000.npy"', f'"{val_shard}"'))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(block, {"__name__": "usage_example"})  # noqa: S102 - the documented code is tested
    return eval(printed.getvalue())  # noqa: S307 - a list of class names, printed by the example


def checkpoint_normalization(torch, path):
    """norm_mean and norm_std of checkpoint.pt's archive (after its 32-byte header)."""
    payload = path.read_bytes()[CHECKPOINT_HEADER:]
    sd = torch.jit.load(io.BytesIO(payload)).state_dict()
    return sd["norm_mean"].numpy(), sd["norm_std"].numpy()


def case_model_pt(tmp):
    """One epoch of cnn on a 2-class cache: model.json describes it, model.pt's buffers hold its
    normalization, and a PyTorch mirror loading model.pt reproduces the run's val_acc."""
    torch = need_torch()
    need_trainer()
    for name, per_class, seed in (("train", 48, 1), ("val", 20, 2)):
        make_folder(tmp / f"{name}_src", per_class, seed)
        build(tmp / f"{name}_src", tmp / name, "--size", "16")
    out = tmp / "out"
    cmd = [DSCACHE_TRAIN, "--train", tmp / "train", "--val", tmp / "val", "--epochs", "1",
           "--batch", "8", "--threads", "1", "--seed", "1", "--precision", "fp32",
           "--no-progress", "--output", out]
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    check_eq(p.returncode, 0, f"dscache-train exit ({p.stderr})")

    card = json.loads((out / "model.json").read_text())
    train_manifest = load_manifest(tmp / "train")
    want = {"format": "dscache-model/1", "model": "cnn", "task": "classify", "in_channels": 3,
            "height": 16, "width": 16, "outputs": 2, "classes": train_manifest["classes"],
            "channels_order": train_manifest["channel_order"]}
    for k, v in want.items():
        check_eq(card.get(k), v, f"model.json {k}")
    norm = card["normalization"]
    check_eq(norm["input"], "NCHW float32, x = (pixel/255 - mean[c]) / std[c]",
             "model.json normalization.input")
    check(not any(k in card for k in ("targets", "target_mean", "ignore_index")),
          f"model.json holds keys of other tasks: {sorted(card)}")

    # The statistics are the training cache's, as the checkpoint recorded them.
    images = load_images(tmp / "train").astype(np.float64) / 255
    pixels = images.reshape(-1, 3)
    np.testing.assert_allclose(norm["mean"], pixels.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm["std"], pixels.std(0), rtol=1e-9, atol=1e-12)
    ck_mean, ck_std = checkpoint_normalization(torch, out / "checkpoint.pt")
    check_eq(list(ck_mean), norm["mean"], "checkpoint.pt's norm_mean vs model.json")
    check_eq(list(ck_std), norm["std"], "checkpoint.pt's norm_std vs model.json")

    # model.pt: the architecture's parameters and the two normalization buffers.
    module = torch.jit.load(str(out / "model.pt"))
    sd = module.state_dict()
    buffers = dict(module.named_buffers())
    for key, values in (("dscache_norm_mean", norm["mean"]), ("dscache_norm_std", norm["std"])):
        check(key in buffers, f"model.pt has no buffer {key}: {sorted(buffers)}")
        check_eq(buffers[key].dtype, torch.float32, f"{key} dtype")
        check_eq(buffers[key].tolist(), np.float32(values).tolist(), f"{key} vs model.json")
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    check_eq(shapes, {"conv1.weight": (32, 3, 3, 3), "conv1.bias": (32,),
                      "conv2.weight": (64, 32, 3, 3), "conv2.bias": (64,),
                      "fc1.weight": (128, 64 * 4 * 4), "fc1.bias": (128,),
                      "fc2.weight": (2, 128), "fc2.bias": (2,),
                      "dscache_norm_mean": (3,), "dscache_norm_std": (3,)},
          "model.pt's state_dict shapes")

    # Inference as a user does it: mirror + state_dict, inputs normalized by model.json.
    model = cnn_mirror(torch, card["in_channels"], card["outputs"], card["height"], card["width"])
    weights = {k: v for k, v in sd.items() if not k.startswith("dscache_")}
    model.load_state_dict(weights, strict=True)
    model.eval()
    val = torch.from_numpy(load_images(tmp / "val")).permute(0, 3, 1, 2).float() / 255
    mean = torch.tensor(norm["mean"], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(norm["std"], dtype=torch.float32).view(1, -1, 1, 1)
    labels = load_labels(tmp / "val")
    with torch.no_grad():
        logits = model((val - mean) / std)
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels)).item()
    predicted = logits.argmax(1).numpy()
    correct = int((predicted == labels).sum())
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    last = [m for m in epochs if m["kind"] == "epoch"][-1]
    run_correct = last["val_acc"] * len(labels)
    print(f"mirror: {correct}/{len(labels)} right, loss {loss:.6f}; the run: val_acc "
          f"{last['val_acc']:.4f}, val_loss {last['val_loss']:.6f}")
    check(abs(correct - run_correct) <= 1,
          f"the mirror gets {correct}/{len(labels)} right, the run's val_acc {last['val_acc']} "
          f"is {run_correct:.1f}")
    # The example in docs/TRAINER.md, run as written, predicts the same classes.
    shards = load_manifest(tmp / "val")["shards"]
    check_eq(len(shards), 1, "val cache shards")
    documented = usage_snippet_predictions(out, tmp / "val" / shards[0]["file"])
    check_eq(documented, [card["classes"][i] for i in predicted.tolist()],
             "docs/TRAINER.md's example vs the mirror")
    # dscache.models.load_model + normalize: the same predictions from the run directory alone.
    # (models.py imports only torch: loaded from the source tree, with or without the built module)
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "dscache_models", Path(__file__).resolve().parents[2] / "python" / "dscache" / "models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    loaded, loaded_card = models.load_model(out)
    check_eq(loaded_card, card, "load_model's card vs model.json")
    with torch.no_grad():
        again = loaded(models.normalize(load_images(tmp / "val"), loaded_card)).argmax(1).numpy()
    check_eq(again.tolist(), predicted.tolist(), "dscache.models.load_model's predictions")
    # The loss is the sharper test: a normalization off by a little moves it.
    check(abs(loss - last["val_loss"]) <= 1e-4 * max(1.0, last["val_loss"]),
          f"the mirror's mean cross entropy {loss} != the run's val_loss {last['val_loss']}")


CASES = {"model_pt": case_model_pt}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
