"""PyTorch mirrors of dscache-train's models (trainer/models.cpp): the same layers in the same
order under the same parameter names, so a `state_dict` moves between a model trained by
`dscache-train` and one trained from Python, and a Python loop over the same data trains the same
network (bench/task_bench.py compares them).

    from dscache.models import build_model
    model = build_model("unet-small", "segment", in_channels=1, outputs=11, height=56, width=56)

    from dscache.models import load_model, normalize   # a finished dscache-train run
    model, card = load_model("run/")                   # run/model.json + run/model.pt
    logits = model(normalize(uint8_nhwc_images, card))

Needs python3-torch; `import dscache` alone does not import this module.

- `Cnn` (classify, multilabel, regress): conv1 3x3 (C -> 32, padding 1) - ReLU - maxpool 2 -
  conv2 3x3 (32 -> 64, padding 1) - ReLU - maxpool 2 - flatten - fc1 (64 * (H/4) * (W/4) -> 128)
  - ReLU - fc2 (128 -> outputs); H/4 is floor(floor(H / 2) / 2).
- `UnetSmall` (segment, ~480k parameters at 11 classes): four encoder blocks (16, 32, 64, 128
  channels, each after a 2x2 max pool but the first), three decoder blocks on the bilinearly
  upsampled deeper map concatenated with the skip, a 1x1 head. GroupNorm(4) everywhere, so a
  batch's gradient is the sum of its samples'. Any H, W >= 8, odd ones included: pools floor and
  each upsampling goes to its skip's exact size. Output (N, outputs, H, W).
Default PyTorch initialisation (LibTorch's is the same).
"""
import json
import os

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Block", "Cnn", "UnetSmall", "build_model", "load_model", "normalize", "KINDS"]

KINDS = ("cnn", "unet-small")  # resnet18 is dscache-train's only model without a mirror here


class Cnn(nn.Module):
    """dscache-train's `cnn`: (N, C, H, W) float -> (N, outputs) logits or values."""

    def __init__(self, in_channels, outputs, height, width):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * (height // 2 // 2) * (width // 2 // 2), 128)
        self.fc2 = nn.Linear(128, outputs)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class Block(nn.Module):
    """UnetSmall's block: (conv 3x3 without bias, GroupNorm(4), ReLU) twice."""

    def __init__(self, a, b):
        super().__init__()
        self.conv1 = nn.Conv2d(a, b, 3, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(4, b)
        self.conv2 = nn.Conv2d(b, b, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(4, b)

    def forward(self, x):
        # GroupNorm in its weights' dtype: under CPU autocast (bf16) PyTorch 1.13's group_norm
        # refuses a bf16 input with fp32 weights; outside autocast the cast is a no-op.
        x = F.relu(self.gn1(self.conv1(x).to(self.gn1.weight.dtype)))
        return F.relu(self.gn2(self.conv2(x).to(self.gn2.weight.dtype)))


def _up_cat(x, skip):
    x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
    return torch.cat([x, skip], dim=1)


class UnetSmall(nn.Module):
    """dscache-train's `unet-small`: (N, C, H, W) float -> (N, outputs, H, W) logits."""

    def __init__(self, in_channels, outputs):
        super().__init__()
        self.enc1 = Block(in_channels, 16)
        self.enc2 = Block(16, 32)
        self.enc3 = Block(32, 64)
        self.mid = Block(64, 128)
        self.dec3 = Block(128 + 64, 64)
        self.dec2 = Block(64 + 32, 32)
        self.dec1 = Block(32 + 16, 16)
        self.head = nn.Conv2d(16, outputs, 1)

    def forward(self, x):
        if x.shape[-2] < 8 or x.shape[-1] < 8:
            raise ValueError(f"UnetSmall: input {x.shape[-2]}x{x.shape[-1]} is smaller than 8x8")
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        e3 = self.enc3(F.max_pool2d(e2, 2))
        m = self.mid(F.max_pool2d(e3, 2))
        d3 = self.dec3(_up_cat(m, e3))
        d2 = self.dec2(_up_cat(d3, e2))
        d1 = self.dec1(_up_cat(d2, e1))
        return self.head(d1)


def build_model(kind, task, in_channels, outputs, height, width):
    """The model dscache-train builds for `--model KIND --task TASK` on HEIGHT x WIDTH x
    IN_CHANNELS images with OUTPUTS outputs (classes, target columns, or mask classes).
    ValueError for a pair dscache-train refuses or has no mirror here."""
    tasks = {"cnn": ("classify", "multilabel", "regress"), "unet-small": ("segment",)}
    if kind not in tasks:
        raise ValueError(f"build_model: kind {kind!r} has no Python mirror (have {KINDS})")
    if task not in tasks[kind]:
        raise ValueError(f"build_model: {kind!r} is for --task {'|'.join(tasks[kind])}, "
                         f"not {task!r}")
    if min(in_channels, outputs, height, width) < 1:
        raise ValueError(f"build_model: in_channels {in_channels}, outputs {outputs}, height "
                         f"{height}, width {width}: each must be >= 1")
    if kind == "cnn":
        if height < 4 or width < 4:
            raise ValueError(f"build_model: cnn needs images of at least 4x4, not "
                             f"{height}x{width}")
        return Cnn(in_channels, outputs, height, width)
    if height < 8 or width < 8:
        raise ValueError(f"build_model: unet-small needs images of at least 8x8, not "
                         f"{height}x{width}")
    return UnetSmall(in_channels, outputs)


def load_model(run):
    """A finished dscache-train run as `(model, card)`: `run` is its --output directory (or the
    path of its model.pt, beside model.json). `card` is model.json's dict; `model` is
    build_model() of the card's architecture with model.pt's weights (strict), in eval mode.
    Feed it `normalize(images, card)`. ValueError naming the file when model.json is not a
    dscache-model/1 card or names a model without a mirror here."""
    run = os.fspath(run)
    pt = run if run.endswith(".pt") else os.path.join(run, "model.pt")
    card_path = os.path.join(os.path.dirname(pt) or ".", "model.json")
    with open(card_path) as f:
        card = json.load(f)
    if card.get("format") != "dscache-model/1":
        raise ValueError(f"{card_path}: format {card.get('format')!r} is not dscache-model/1")
    model = build_model(card["model"], card["task"], card["in_channels"], card["outputs"],
                        card["height"], card["width"])
    state = torch.jit.load(pt, map_location="cpu").state_dict()
    model.load_state_dict({k: v for k, v in state.items() if not k.startswith("dscache_")},
                          strict=True)
    return model.eval(), card


def normalize(images, card):
    """uint8 images as the cache stores them, (N, H, W, C) or (H, W, C) (numpy or torch), as the
    float32 NCHW input the card's model was trained on: (pixel / 255 - mean[c]) / std[c]."""
    x = torch.as_tensor(images)
    if x.dim() == 3:
        x = x.unsqueeze(0)
    x = x.permute(0, 3, 1, 2).float() / 255
    mean = torch.tensor(card["normalization"]["mean"], dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(card["normalization"]["std"], dtype=torch.float32).view(1, -1, 1, 1)
    return (x - mean) / std
