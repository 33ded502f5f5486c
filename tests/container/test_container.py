#!/usr/bin/python3
"""The `container` suite: the repository's Containerfile built with podman on a Debian base made
on this machine (image.py: debootstrap + podman import; no registry), then the image's own
programs run on real data:

  dscache build of Fashion-MNIST (the image's dataset-fashion-mnist) and of PNGs written here,
  each byte-identical to the same build by the host's dscache; dscache inspect and verify;
  dscache-train --max-steps 2 on the Fashion-MNIST cache (finite losses, model.pt written);
  python3 -c 'import dscache' from the image's site-packages reading that cache, its pixels and
  labels equal to the shards the host built.

Usage: test_container.py image   (env DSCACHE: the host's dscache; DSCACHE_SOURCE_ROOT;
DSCACHE_CONTAINER_CACHE, DSCACHE_CONTAINER_JOBS (compile jobs in the image, default one per CPU),
DSCACHE_DEBIAN_MIRROR: image.py). SKIP (77) only where podman is not installed or cannot run a
container here (the reason is printed: its own error).
"""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # testrunner.py
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import testrunner  # noqa: E402
from image import BASE_TAG, IMAGE_TAG, Podman, build_image, cache_dir, log, make_base  # noqa: E402
from testrunner import Failure, Skip  # noqa: E402

ROOT = Path(os.environ.get("DSCACHE_SOURCE_ROOT", HERE.parent.parent))
FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
CLASSES = "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
# What the image's Python reads back from the Fashion-MNIST cache, printed as one JSON line.
PY_READ = """
import json, sys
import numpy as np
import dscache
c = dscache.Cache(sys.argv[1])
imgs = np.stack([np.asarray(c[i][0]) for i in range(len(c))])
batch = next(iter(dscache.Loader(c, batch_size=8, shuffle=False)))
print(json.dumps({"file": dscache.__file__, "count": len(c), "classes": c.classes,
                  "shape": list(imgs.shape), "pixel_sum": int(imgs.astype(np.int64).sum()),
                  "labels": [int(c.label(i)) for i in range(len(c))],
                  "batch": list(np.asarray(batch[0]).shape)}))
"""


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def same_cache(inside, outside, what):
    """The image's cache and the host's of the same sources: same manifest count and shape, the
    same bytes in every shard and in labels.npy."""
    mi = json.loads((inside / "manifest.json").read_text())
    mo = json.loads((outside / "manifest.json").read_text())
    for key in ("count", "shape", "classes", "class_counts"):
        check(mi[key] == mo[key], f"{what}: manifest {key} {mi[key]!r} in the image, "
                                  f"{mo[key]!r} on the host")
    files = [s["file"] for s in mo["shards"]] + ["labels.npy", "checksums.npy"]
    check([s["file"] for s in mi["shards"]] == [s["file"] for s in mo["shards"]],
          f"{what}: shard lists differ")
    for f in files:
        check((inside / f).read_bytes() == (outside / f).read_bytes(),
              f"{what}: {f} differs between the image's build and the host's")
    return mi


def host_build(src, dst, *opts):
    subprocess.run([os.environ["DSCACHE"], "build", src, dst, "--quiet", *opts], check=True,
                   capture_output=True)


def preflight_podman(podman):
    if not shutil.which("podman"):
        raise Skip("podman is not installed (scripts/setup-deps --container installs it)")
    p = podman.cmd(["info"], check=False, timeout=120)
    if p.returncode != 0:
        raise Skip(f"podman cannot run here ({'rootful' if os.geteuid() == 0 else 'rootless'}): "
                   f"`podman info` says: {p.stderr.strip()}")


def make_image(tmp):
    """The base (once per cache dir) and the image; prints how long each took."""
    podman = Podman(cache_dir())
    preflight_podman(podman)
    t0 = time.monotonic()
    seconds = make_base(podman)
    log(f"base {BASE_TAG}: {'made in %.0f s' % seconds if seconds else 'reused'}")
    probe = podman.run(BASE_TAG, ["true"], check=False)
    if probe.returncode != 0:
        raise Skip(f"podman cannot run a container here "
                   f"({'rootful' if os.geteuid() == 0 else 'rootless'}): {probe.stderr.strip()}")
    seconds = build_image(podman, ROOT, tmp / "build.log")
    log(f"podman build of Containerfile: {seconds:.0f} s; its steps, each with the second it "
        "began:")
    for line in (tmp / "build.log").read_text(errors="replace").splitlines():
        if re.match(r"\[ *\d+s\] (STEP |--> Using cache|COMMIT)", line):
            print(f"  {line[:150]}")
    log(f"base + image: {time.monotonic() - t0:.0f} s")
    return podman


def case_image(tmp):
    podman = make_image(tmp)
    data = tmp / "data"
    data.mkdir()

    def run(*argv, timeout=600):
        t0 = time.monotonic()
        p = podman.run(IMAGE_TAG, ["sh", "-c", 'cd /data && exec "$@"', "sh", *argv],
                       volumes=[(data, "/data")], timeout=timeout)
        log(f"{' '.join(argv[:2])}: {time.monotonic() - t0:.1f} s")
        return p

    where = run("sh", "-c", "command -v dscache; command -v dscache-train").stdout.split()
    check(where == ["/usr/local/bin/dscache", "/usr/local/bin/dscache-train"],
          f"the image's programs are not the installed ones: {where}")

    # Fashion-MNIST from the image's own dataset package; the host's build of the same file.
    out = run("dscache", "build", FASHION, "/data/fashion", "--classes", CLASSES).stdout
    check("built 10000 samples (0 skipped)" in out, f"dscache build in the image said: {out}")
    host_build(FASHION, tmp / "host-fashion", "--classes", CLASSES)
    same_cache(data / "fashion", tmp / "host-fashion", "Fashion-MNIST")
    out = run("dscache", "inspect", "/data/fashion").stdout
    check("samples    10000" in out and "28x28x1" in out and "Ankle boot      1000" in out,
          f"dscache inspect in the image said: {out}")
    out = run("dscache", "verify", "/data/fashion").stdout
    check(out.startswith("OK: 10000 samples"), f"dscache verify in the image said: {out}")

    # PNGs written here (OpenCV decode and resize in the image); the host's build of them.
    subprocess.run([sys.executable, str(ROOT / "tests" / "write_pngs.py"), str(data / "pngs"),
                    "3", "5", "40", "30", "7"], check=True)
    out = run("dscache", "build", "/data/pngs", "/data/pngcache", "--size", "16").stdout
    check("built 15 samples (0 skipped)" in out, f"dscache build of PNGs said: {out}")
    host_build(data / "pngs", tmp / "host-png", "--size", "16")
    same_cache(data / "pngcache", tmp / "host-png", "PNGs")

    # Two optimizer steps of the CNN on the Fashion-MNIST cache.
    run("dscache-train", "--train", "/data/fashion", "--model", "cnn", "--max-steps", "2",
        "--batch", "16", "--threads", "1", "--log-every", "1", "--output", "/data/run")
    lines = [json.loads(x) for x in (data / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x.get("kind") == "step"]
    check([x["step"] for x in steps] == [1, 2], f"metrics.jsonl steps: {steps}")
    check(all(math.isfinite(x["loss"]) and x["loss"] > 0 for x in steps),
          f"losses not finite and positive: {steps}")
    check((data / "run" / "model.pt").stat().st_size > 1000, "model.pt is missing or empty")

    # The installed Python module reads the cache; the host's numpy reads its own build.
    got = json.loads(run("python3", "-c", PY_READ, "/data/fashion").stdout)
    check(re.fullmatch(r"/usr/local/lib/python3\.\d+/dist-packages/dscache/__init__\.py",
                       got["file"]),
          f"import dscache in the image loaded {got['file']}")
    ref = np.load(tmp / "host-fashion" / "images-00000.npy")
    labels = np.load(tmp / "host-fashion" / "labels.npy")
    check(got["count"] == 10000 and got["shape"] == list(ref.shape),
          f"count {got['count']}, shape {got['shape']}; the host's {list(ref.shape)}")
    check(got["pixel_sum"] == int(ref.astype(np.int64).sum()),
          f"pixel sum {got['pixel_sum']}, the host's {int(ref.astype(np.int64).sum())}")
    check(got["labels"] == labels.tolist(), "labels read in the image differ from the host's")
    check(got["classes"] == CLASSES.split(","), f"classes {got['classes']}")
    check(got["batch"] == [8, 28, 28, 1], f"a Loader batch of 8 has shape {got['batch']}")
    run("python3", "-c", "import dscache.torch, torch")


CASES = {"image": case_image}


def stop_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # meson's timeout: unwind, the temp dir is removed


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    sys.exit(testrunner.main(CASES, sys.argv, prefix="dscache-container-"))
