#!/usr/bin/python3
"""Tests of dscache.models' ResNet-18 mirrors (ResNet18, ResNet18Seg): torchvision's parameter
names and counts (the trainer's layout), build_model's stem rule (CIFAR stem up to 64 px, as
dscache-train's make_model), output shapes of the classifier and the segmenter for even, odd and
tiny sizes (also under CPU bf16 autocast), and eval mode using BatchNorm's running statistics.
Outputs against the trainer's own models: tests/cli/test_model_mirrors.py. SKIP without
python3-torch."""
import sys

from pyhelpers import Skip, main


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")


def encoder_names():
    """torchvision's ResNet-18 parameter names without `fc` (what trainer/models.cpp registers)."""
    names = ["conv1.weight", "bn1.weight", "bn1.bias"]
    for i in range(1, 5):
        for j in range(2):
            b = f"layer{i}.{j}"
            names += [f"{b}.conv1.weight", f"{b}.bn1.weight", f"{b}.bn1.bias",
                      f"{b}.conv2.weight", f"{b}.bn2.weight", f"{b}.bn2.bias"]
            if i > 1 and j == 0:
                names += [f"{b}.downsample.0.weight", f"{b}.downsample.1.weight",
                          f"{b}.downsample.1.bias"]
    return names


def test_resnet18_names_counts_and_stems(tmp):
    need_torch()
    from dscache.models import ResNet18, ResNet18Seg, build_model
    m = build_model("resnet18", "classify", 3, 1000, 224, 224)
    assert isinstance(m, ResNet18) and not m.small_input, "224 px: the ImageNet stem"
    assert [n for n, _ in m.named_parameters()] == encoder_names() + ["fc.weight", "fc.bias"]
    n = sum(p.numel() for p in m.parameters())
    assert n == 11_689_512, f"torchvision's resnet18 has 11,689,512 parameters, this {n}"
    assert tuple(m.conv1.weight.shape) == (64, 3, 7, 7)
    buffers = [k for k in m.state_dict() if k.endswith(("running_mean", "running_var"))]
    assert len(buffers) == 2 * 20, f"20 BatchNorms' running statistics: {len(buffers)}"
    # The trainer's rule: the CIFAR stem (3x3 stride 1, no max-pool) for sides up to 64 px.
    for (h, w), small in (((64, 64), True), ((32, 17), True), ((65, 32), False),
                          ((40, 100), False)):
        for task in ("classify", "multilabel", "regress", "segment"):
            m = build_model("resnet18", task, 1, 10, h, w)
            want = ResNet18Seg if task == "segment" else ResNet18
            assert type(m) is want, f"{task} {h}x{w}: {type(m).__name__}"
            assert m.small_input == small, f"{task} {h}x{w}: small_input {m.small_input}"
            k = 3 if small else 7
            assert tuple(m.conv1.weight.shape) == (64, 1, k, k), f"{h}x{w}: stem {k}x{k}"
    m = build_model("resnet18", "classify", 3, 10, 32, 32)
    n = sum(p.numel() for p in m.parameters())
    assert n == 11_173_962, f"CIFAR-stem resnet18 at 10 classes: 11,173,962 parameters, not {n}"
    seg = build_model("resnet18", "segment", 3, 11, 56, 56)
    heads = [f"lat{i}.{p}" for i in range(1, 5) for p in ("weight", "bias")]
    heads += ["head_conv.weight", "head_gn.weight", "head_gn.bias", "head_out.weight",
              "head_out.bias"]
    assert [n for n, _ in seg.named_parameters()] == encoder_names() + heads
    assert not hasattr(seg, "fc"), "the segmenter has no fc"
    assert tuple(seg.head_out.weight.shape) == (11, 64, 1, 1)


def test_resnet18_shapes_bf16_and_eval(tmp):
    need_torch()
    import torch
    from dscache.models import build_model
    torch.manual_seed(0)
    for h, w in ((16, 16), (9, 13), (1, 1), (72, 80), (65, 67)):
        c = build_model("resnet18", "classify", 3, 7, h, w).eval()
        s = build_model("resnet18", "segment", 3, 5, h, w).eval()
        x = torch.randn(2, 3, h, w)
        with torch.no_grad():
            assert tuple(c(x).shape) == (2, 7), f"{h}x{w}: classifier {tuple(c(x).shape)}"
            y = s(x)
        assert tuple(y.shape) == (2, 5, h, w), f"{h}x{w}: segmenter {tuple(y.shape)}"
        assert torch.isfinite(y).all(), f"{h}x{w}: non-finite outputs"
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # --precision bf16
        y = s(torch.randn(2, 3, 65, 67))
    assert tuple(y.shape) == (2, 5, 65, 67) and torch.isfinite(y.float()).all(), "bf16 autocast"
    # eval(): BatchNorm normalizes with the running statistics, so a sample's output does not
    # depend on the rest of its batch; in train mode it does.
    m = build_model("resnet18", "classify", 3, 4, 16, 16)
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        m.train()
        assert not torch.allclose(m(x)[:1], m(x[:1].repeat(4, 1, 1, 1))[:1], atol=1e-4), \
            "train mode: batch statistics"
        m.eval()
        assert torch.allclose(m(x)[:1], m(x[:1]), rtol=1e-5, atol=1e-5), "eval mode"


if __name__ == "__main__":
    sys.exit(main(globals()))
