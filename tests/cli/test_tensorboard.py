#!/usr/bin/python3
"""dscache-train's TensorBoard event files (OUTPUT/tb/), read back as TensorBoard would, without
TensorBoard: the TFRecord frames with both masked CRC-32Cs checked here, the Event and Summary
messages parsed by Debian's python3-protobuf from the published definitions (tensorboard/*.proto,
compiled with protoc in the case's temporary directory). Every scalar must equal its
metrics.jsonl value (as a float32) at its line's step. Env: DSCACHE (builds the cache) and
DSCACHE_TRAIN; registered by trainer/meson.build.
"""

import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np

from cli_helpers import Failure, Skip, build, check, check_eq, main, make_simple_folder

DSCACHE_TRAIN = os.environ.get("DSCACHE_TRAIN", "")
PROTO_DIR = Path(__file__).resolve().parent / "tensorboard"


def crc32c(data):
    """CRC-32C (Castagnoli, reflected 0x82F63B78), bitwise: independent of the C++ table."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def messages(tmp):
    """event_pb2, compiled from the .proto files by protoc into TMP."""
    protoc = shutil.which("protoc")
    if protoc is None:
        raise Failure("protoc not found: scripts/setup-deps installs protobuf-compiler")
    out = tmp / "pb"
    out.mkdir()
    subprocess.run([protoc, f"-I{PROTO_DIR}", f"--python_out={out}", "event.proto",
                    "summary.proto"], check=True, cwd=PROTO_DIR)
    sys.path.insert(0, str(out))
    return importlib.import_module("event_pb2")


def records(path):
    """The records of one event file, both CRCs of each checked."""
    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        check(len(data) - at >= 12, f"{path.name}: a frame cut short at byte {at}")
        (n,) = struct.unpack_from("<Q", data, at)
        (len_crc,) = struct.unpack_from("<I", data, at + 8)
        check_eq(len_crc, masked(data[at:at + 8]), f"{path.name}@{at}: length CRC")
        check(len(data) - at - 12 >= n + 4, f"{path.name}: a record cut short at byte {at}")
        body = data[at + 12:at + 12 + n]
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + n)
        check_eq(body_crc, masked(body), f"{path.name}@{at}: data CRC")
        out.append(body)
        at += 12 + n + 4
    return out


def events(pb, tb):
    """Each event file of TB in name order (TensorBoard's), as a list of parsed Events."""
    files = sorted(p for p in tb.iterdir() if "tfevents" in p.name)
    out = []
    for f in files:
        evs = []
        for body in records(f):
            e = pb.Event()
            e.ParseFromString(body)
            check_eq(e.SerializeToString(), body, f"{f.name}: an Event re-encoded")
            evs.append(e)
        check(evs and evs[0].file_version == "brain.Event:2",
              f"{f.name}: the first record is not file_version brain.Event:2")
        out.append(evs)
    return out


def scalars(pb, files):
    """{(tag, step): value} as TensorBoard shows it: a SessionLog START at step S drops what was
    logged at S and after. Fails on a (tag, step) logged twice."""
    seen = {}
    for evs in files:
        for e in evs[1:]:
            if e.WhichOneof("what") == "session_log":
                check_eq(e.session_log.status, pb.SessionLog.START, "session_log status")
                seen = {k: v for k, v in seen.items() if k[1] < e.step}
                continue
            check_eq(e.WhichOneof("what"), "summary", "an event's content")
            for v in e.summary.value:
                check((v.tag, e.step) not in seen, f"{v.tag} at step {e.step} twice")
                seen[(v.tag, e.step)] = v.simple_value
    return seen


def expected(out):
    """{(tag, step): float32 value} from OUT/metrics.jsonl (the tags of docs/TRAINER.md)."""
    want = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        for k, v in m.items():
            if k in ("step", "epoch", "kind") or isinstance(v, bool) or v is None:
                continue
            if m["kind"] == "step":
                tag = "train/" + k
            else:
                tag = "val/" + k[4:] if k.startswith("val_") else "epoch/" + k
            want[(tag, m["step"])] = float(np.float32(v))
    return want


def train(tmp, out, *extra, env=None):
    if not DSCACHE_TRAIN or not os.access(DSCACHE_TRAIN, os.X_OK):
        raise Skip("DSCACHE_TRAIN is not set to a dscache-train binary (trainer not built)")
    cache = tmp / "cache"
    if not cache.exists():
        make_simple_folder(tmp / "src", ["a", "b", "c"], 8, (16, 16), seed=4)
        build(tmp / "src", cache, "--size", "16")
    e = {k: v for k, v in os.environ.items() if not k.startswith("DSCACHE_TEST_")}
    e.update(env or {})
    cmd = [DSCACHE_TRAIN, "--train", cache, "--val", cache, "--batch", "8", "--epochs", "2",
           "--threads", "1", "--seed", "1", "--log-every", "1", "--no-progress",
           "--output", out] + list(extra)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=e,
                          timeout=300)


def check_matches(pb, out, files):
    got = scalars(pb, files)
    want = expected(out)
    check(want, "metrics.jsonl holds no scalars")
    for tag in ("train/loss", "train/lr", "train/scale", "train/samples_per_s", "epoch/loss",
                "epoch/samples_per_s", "epoch/data_wait", "val/loss", "val/acc"):
        check(any(t == tag for t, _ in want), f"no {tag} in metrics.jsonl's tags")
    check_eq(sorted(got), sorted(want), "the (tag, step) pairs of the event files")
    for k, v in want.items():
        check_eq(got[k], v, f"{k[0]} at step {k[1]}")


def case_run(tmp):
    """Two epochs of three steps: one event file whose scalars are metrics.jsonl's."""
    pb = messages(tmp)
    out = tmp / "out"
    p = train(tmp, out)
    check_eq(p.returncode, 0, f"dscache-train exit ({p.stderr})")
    files = events(pb, out / "tb")
    check_eq(len(files), 1, "event files")
    check(not any(e.WhichOneof("what") == "session_log" for e in files[0]),
          "a fresh run's file holds a session_log")
    check_matches(pb, out, files)
    epoch_steps = [e.step for e in files[0] if e.WhichOneof("what") == "summary" and
                   e.summary.value[0].tag.startswith(("epoch/", "val/"))]
    check_eq(sorted(set(epoch_steps)), [3, 6], "the epoch lines' steps")


def case_resume(tmp):
    """Killed after step 5 (last checkpoint at 4), then resumed: a second file that starts by
    dropping steps 5 on, so the replayed step is shown once, with the resumed run's value."""
    pb = messages(tmp)
    out = tmp / "out"
    p = train(tmp, out, "--checkpoint-every", "2", env={"DSCACHE_TEST_KILL_AFTER_STEPS": "5"})
    check_eq(p.returncode, -9, f"the killed run's exit ({p.stderr})")
    first = events(pb, out / "tb")
    check_eq(len(first), 1, "event files after the kill")
    check(any(e.step == 5 for e in first[0]), "step 5 was not logged before the kill")
    p = train(tmp, out, "--checkpoint-every", "2", "--resume")
    check_eq(p.returncode, 0, f"the resumed run's exit ({p.stderr})")
    files = events(pb, out / "tb")
    check_eq(len(files), 2, "event files after the resume")
    start = files[1][1]
    check_eq(start.WhichOneof("what"), "session_log", "the resumed file's second record")
    check_eq(start.step, 5, "the resumed file's purge step")
    check_matches(pb, out, files)


def case_force(tmp):
    """--force starts over: the old run's event files go with its metrics."""
    pb = messages(tmp)
    out = tmp / "out"
    for extra in ([], ["--force"]):
        p = train(tmp, out, *extra)
        check_eq(p.returncode, 0, f"dscache-train {extra} exit ({p.stderr})")
    files = events(pb, out / "tb")
    check_eq(len(files), 1, "event files after --force")
    check_matches(pb, out, files)


def case_tb_not_a_directory(tmp):
    """OUTPUT/tb a FIFO: refused naming it, never opened (no hang)."""
    out = tmp / "out"
    out.mkdir()
    os.mkfifo(out / "tb")
    p = train(tmp, out)
    check_eq(p.returncode, 1, f"exit (ERROR, docs/OPERATIONS.md; {p.stderr})")
    check(str(out / "tb") in p.stderr and "not a directory" in p.stderr,
          f"the message does not name OUTPUT/tb: {p.stderr}")


CASES = {
    "tb_run": case_run,
    "tb_resume": case_resume,
    "tb_force": case_force,
    "tb_not_a_directory": case_tb_not_a_directory,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
