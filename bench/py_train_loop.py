#!/usr/bin/python3
"""docs/PYTHON.md's "From PyTorch" training loop, runnable: a small CNN trained on a dscache
cache through dscache.Loader, with a checkpoint (model, optimizer and loader position) written
every --checkpoint-every steps and resumed exactly by --resume.

Usage: py_train_loop.py CACHE [--epochs 2] [--batch 256] [--lr 0.05] [--workers 2]
                        [--checkpoint ckpt.pt] [--checkpoint-every 100] [--resume]
                        [--max-steps N]
Run with /usr/bin/python3 and PYTHONPATH=build/python (or after `meson install`). Under torchrun
each rank takes its share of every epoch: the Loader reads the rank and world size from
torch.distributed once the process group is initialized.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import dscache


def make_model(channels, classes):
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, classes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--checkpoint", default="ckpt.pt")
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: no limit)")
    a = ap.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cache = dscache.Cache(a.cache)
    h, w, c = cache.shape
    loader = dscache.Loader(cache, batch_size=a.batch, shuffle=True, seed=42,
                            workers=a.workers, drop_last=True, copy=False)  # used at once
    model = make_model(c, len(cache.classes)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    step = 0
    if a.resume and os.path.exists(a.checkpoint):
        ck = torch.load(a.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        loader.load_state_dict(ck["loader"])  # the next batch is the one after the checkpoint
        step = ck["step"]
        print(f"resumed at step {step}, epoch {loader.epoch}")

    while loader.epoch < a.epochs:
        epoch, t0, seen, correct, loss_sum = loader.epoch, time.time(), 0, 0, 0.0
        for images, labels in loader.torch():
            # uint8 NHWC batch (a view of the Loader's buffer, valid until the next batch):
            # to the device first, then float, NCHW and normalized there.
            x = images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
            y = labels.to(device, non_blocking=True)
            logits = model((x - 0.5) / 0.25)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += len(y)
            correct += int((logits.argmax(1) == y).sum())
            loss_sum += float(loss) * len(y)
            if step % a.checkpoint_every == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "loader": loader.state_dict(), "step": step},
                           a.checkpoint + ".tmp")
                os.replace(a.checkpoint + ".tmp", a.checkpoint)
            if a.max_steps and step >= a.max_steps:
                print(f"stopped at step {step} (--max-steps)")
                return
        secs = time.time() - t0
        print(f"epoch {epoch}: loss {loss_sum / max(seen, 1):.4f}, train acc "
              f"{correct / max(seen, 1):.3f}, {seen / secs:.0f} samples/s, data wait "
              f"{loader.wait_seconds():.2f} s of {secs:.1f} s")


if __name__ == "__main__":
    main()
