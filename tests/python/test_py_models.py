#!/usr/bin/python3
"""Tests of dscache.models, the PyTorch mirrors of dscache-train's models: UnetSmall's parameter
names and count (the trainer's contract, so load_state_dict moves weights between them), output
shapes for even and odd sizes (also under CPU bf16 autocast), a batch's gradient equal to the sum of its samples' (GroupNorm, no
batch statistics), Cnn's flattened size for odd sides, and build_model's refusals. SKIP without
python3-torch."""
import sys

from pyhelpers import Skip, main


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise Skip("python3-torch is not installed (scripts/setup-deps installs it)")


def block_params(a, b):
    """conv1 (a -> b, 3x3, no bias) + gn1 (b weights, b biases) + conv2 (b -> b) + gn2."""
    return 9 * a * b + 2 * b + 9 * b * b + 2 * b


def unet_params(c, k):
    return (block_params(c, 16) + block_params(16, 32) + block_params(32, 64) +
            block_params(64, 128) + block_params(128 + 64, 64) + block_params(64 + 32, 32) +
            block_params(32 + 16, 16) + 16 * k + k)


def test_unet_small_names_count_and_shapes(tmp):
    need_torch()
    import torch
    from dscache.models import UnetSmall
    blocks = ["enc1", "enc2", "enc3", "mid", "dec3", "dec2", "dec1"]
    want_names = [f"{b}.{p}" for b in blocks for p in (
        "conv1.weight", "gn1.weight", "gn1.bias", "conv2.weight", "gn2.weight", "gn2.bias")]
    want_names += ["head.weight", "head.bias"]
    for c, k in ((1, 11), (3, 21), (1, 2)):
        m = UnetSmall(c, k)
        names = [n for n, _ in m.named_parameters()]
        assert names == want_names, f"UnetSmall({c}, {k}) parameters: {names}"
        assert list(m.state_dict()) == want_names, "state_dict holds buffers beyond parameters"
        n = sum(p.numel() for p in m.parameters())
        want = unet_params(c, k)
        assert n == want, f"UnetSmall({c}, {k}): {n} parameters, want {want}"
    assert 450_000 < unet_params(1, 11) < 510_000, "the contract's ~480k parameters"
    m = UnetSmall(1, 11).eval()
    for h, w in ((28, 28), (56, 56), (57, 45), (8, 8), (9, 13), (31, 64)):
        y = m(torch.randn(2, 1, h, w))
        assert tuple(y.shape) == (2, 11, h, w), f"{h}x{w}: output {tuple(y.shape)}"
        assert torch.isfinite(y).all(), f"{h}x{w}: non-finite outputs"
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what --precision bf16 runs
        y = m(torch.randn(2, 1, 57, 45))
    assert tuple(y.shape) == (2, 11, 57, 45) and torch.isfinite(y.float()).all(), "bf16 autocast"
    for h, w in ((7, 8), (8, 7)):
        try:
            m(torch.zeros(1, 1, h, w))
        except ValueError as e:
            assert f"{h}x{w}" in str(e), str(e)
        else:
            raise AssertionError(f"{h}x{w}: no ValueError")


def test_unet_small_batch_gradient_is_sum_of_samples(tmp):
    need_torch()
    import torch
    import torch.nn.functional as F
    from dscache.models import UnetSmall
    torch.manual_seed(0)
    m = UnetSmall(1, 3).double()
    x = torch.randn(3, 1, 20, 17, dtype=torch.double)
    t = torch.randint(0, 3, (3, 20, 17))

    def grads(xs, ts):
        m.zero_grad()
        F.cross_entropy(m(xs), ts, reduction="sum").backward()
        return [p.grad.clone() for p in m.parameters()]

    whole = grads(x, t)
    parts = [grads(x[i:i + 1], t[i:i + 1]) for i in range(3)]
    for (name, _), g, *each in zip(m.named_parameters(), whole, *parts):
        assert torch.allclose(g, sum(each), rtol=1e-9, atol=1e-9), f"{name}: batch != sum"


def test_cnn_and_build_model(tmp):
    need_torch()
    import torch
    from dscache.models import Cnn, UnetSmall, build_model
    for (h, w), flat in (((28, 28), 64 * 7 * 7), ((56, 56), 64 * 14 * 14), ((57, 45), 64 * 14 * 11),
                         ((6, 5), 64 * 1 * 1)):
        m = Cnn(1, 10, h, w)
        assert [n for n, _ in m.named_parameters()] == [
            "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
            "fc2.weight", "fc2.bias"]
        assert m.fc1.in_features == flat, f"{h}x{w}: fc1 takes {m.fc1.in_features}, want {flat}"
        assert tuple(m(torch.zeros(2, 1, h, w)).shape) == (2, 10)
    assert isinstance(build_model("cnn", "multilabel", 1, 10, 56, 56), Cnn)
    assert isinstance(build_model("unet-small", "segment", 1, 11, 57, 45), UnetSmall)
    refused = [  # (args, words the message must hold)
        (("resnet50", "classify", 3, 10, 32, 32), "no Python mirror"),
        (("cnn", "segment", 1, 11, 56, 56), "not 'segment'"),
        (("unet-small", "multilabel", 1, 10, 56, 56), "not 'multilabel'"),
        (("unet-small", "segment", 1, 11, 7, 56), "at least 8x8"),
        (("cnn", "classify", 1, 0, 28, 28), "outputs 0"),
    ]
    for args, words in refused:
        try:
            build_model(*args)
        except ValueError as e:
            assert words in str(e), f"{args}: {e}"
        else:
            raise AssertionError(f"build_model{args}: no ValueError")


if __name__ == "__main__":
    sys.exit(main(globals()))
