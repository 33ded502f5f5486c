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
- `ResNet18` (classify, multilabel, regress): torchvision's ResNet-18 layout and names (`conv1`,
  `bn1`, `layer1`..`layer4` of two BasicBlocks, `downsample.0`/`.1`, `fc`) with the trainer's
  stem choice: images of at most 64 px on their longer side get the CIFAR stem (3x3 stride-1
  conv, no max-pool), larger ones the ImageNet stem (7x7 stride-2 conv, 3x3 stride-2 max-pool).
  BatchNorm: eval() uses the running statistics model.pt carries.
- `ResNet18Seg` (segment, `--model resnet18`): ResNet18's four stages without `fc` into an
  FPN-style decoder: 1x1 laterals `lat1`..`lat4` to 64 channels added top-down after bilinear
  upsampling, `head_conv` 3x3 - GroupNorm(8) `head_gn` - ReLU - `head_out` 1x1, upsampled
  (bilinear) to the input size: (N, outputs, H, W).
Default PyTorch initialisation (LibTorch's is the same), and for the ResNets the trainer's
Kaiming-normal (fan_out) re-draw of the encoder's convolutions.
"""
import json
import os

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Block", "Cnn", "UnetSmall", "BasicBlock", "ResNet18", "ResNet18Seg", "build_model",
           "load_model", "normalize", "KINDS"]

KINDS = ("cnn", "resnet18", "unet-small")  # every model dscache-train has


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


def _conv(a, b, k, stride, pad):
    return nn.Conv2d(a, b, k, stride=stride, padding=pad, bias=False)


class BasicBlock(nn.Module):
    """ResNet-18's block: conv1 3x3 (stride) - bn1 - ReLU - conv2 3x3 - bn2, plus the input
    (through `downsample`, 1x1 conv + BatchNorm, where stride or width change), then ReLU."""

    def __init__(self, a, b, stride):
        super().__init__()
        self.conv1 = _conv(a, b, 3, stride, 1)
        self.bn1 = nn.BatchNorm2d(b)
        self.conv2 = _conv(b, b, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(b)
        self.downsample = None
        if stride != 1 or a != b:
            self.downsample = nn.Sequential(_conv(a, b, 1, stride, 0), nn.BatchNorm2d(b))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + identity)


class ResNet18(nn.Module):
    """dscache-train's `resnet18`: (N, C, H, W) float -> (N, outputs). `small_input`: the CIFAR
    stem (the trainer's choice for images of at most 64 px), else the ImageNet stem."""

    def __init__(self, in_channels, outputs, small_input, *, head=True):
        super().__init__()
        self.small_input = small_input
        self.conv1 = _conv(in_channels, 64, 3, 1, 1) if small_input else \
            _conv(in_channels, 64, 7, 2, 3)
        self.bn1 = nn.BatchNorm2d(64)
        a = 64
        for i, b in enumerate((64, 128, 256, 512)):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}",
                    nn.Sequential(BasicBlock(a, b, stride), BasicBlock(b, b, 1)))
            a = b
        # The trainer's (torchvision's) init: Kaiming-normal convolutions, fan_out.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if head:
            self.fc = nn.Linear(512, outputs)

    def stages(self, x):
        """The outputs of layer1..layer4 (strides 1, 2, 4, 8 with the CIFAR stem; 4, 8, 16, 32
        with the ImageNet stem)."""
        x = F.relu(self.bn1(self.conv1(x)))
        if not self.small_input:
            x = F.max_pool2d(x, 3, 2, 1)
        out = []
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = layer(x)
            out.append(x)
        return out

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.stages(x)[-1], 1)
        return self.fc(torch.flatten(x, 1))


def _up_to(x, like):
    return F.interpolate(x, size=like.shape[-2:], mode="bilinear", align_corners=False)


class ResNet18Seg(ResNet18):
    """dscache-train's `--task segment --model resnet18`: (N, C, H, W) -> (N, outputs, H, W)."""

    def __init__(self, in_channels, outputs, small_input):
        super().__init__(in_channels, outputs, small_input, head=False)
        for i, width in enumerate((64, 128, 256, 512)):
            setattr(self, f"lat{i + 1}", nn.Conv2d(width, 64, 1))
        self.head_conv = nn.Conv2d(64, 64, 3, padding=1, bias=False)
        self.head_gn = nn.GroupNorm(8, 64)
        self.head_out = nn.Conv2d(64, outputs, 1)

    def forward(self, x):
        c = self.stages(x)
        lat = (self.lat1, self.lat2, self.lat3, self.lat4)
        p = lat[3](c[3])
        for i in (2, 1, 0):
            p = lat[i](c[i]) + _up_to(p, c[i])
        # GroupNorm in its weights' dtype, as in Block (CPU autocast).
        p = F.relu(self.head_gn(self.head_conv(p).to(self.head_gn.weight.dtype)))
        return _up_to(self.head_out(p), x)


def build_model(kind, task, in_channels, outputs, height, width):
    """The model dscache-train builds for `--model KIND --task TASK` on HEIGHT x WIDTH x
    IN_CHANNELS images with OUTPUTS outputs (classes, target columns, or mask classes).
    ValueError for a pair dscache-train refuses or has no mirror here."""
    tasks = {"cnn": ("classify", "multilabel", "regress"), "unet-small": ("segment",),
             "resnet18": ("classify", "multilabel", "regress", "segment")}
    if kind not in tasks:
        raise ValueError(f"build_model: kind {kind!r} has no Python mirror (have {KINDS})")
    if task not in tasks[kind]:
        raise ValueError(f"build_model: {kind!r} is for --task {'|'.join(tasks[kind])}, "
                         f"not {task!r}")
    if min(in_channels, outputs, height, width) < 1:
        raise ValueError(f"build_model: in_channels {in_channels}, outputs {outputs}, height "
                         f"{height}, width {width}: each must be >= 1")
    if kind == "resnet18":
        small = max(height, width) <= 64  # the trainer's rule (make_model, trainer/models.cpp)
        if task == "segment":
            return ResNet18Seg(in_channels, outputs, small)
        return ResNet18(in_channels, outputs, small)
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
