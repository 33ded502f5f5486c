#!/usr/bin/python3
"""The exit-code table of docs/OPERATIONS.md ("Exit codes"), one row per error kind per command.

Both programs share the table (libcache/include/dscache/exit_codes.h). Each case runs one
command's rows: it provokes every error kind that command can meet and checks the exit code and
that the message names the cause. Cases exit_build .. exit_bench need DSCACHE; exit_train also
needs DSCACHE_TRAIN (dscache-train) and is registered by trainer/meson.build, which knows it.
"""

import fcntl
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from cli_helpers import (DSCACHE, TIMEOUT_S, Failure, Skip, build, check, main,
                         make_simple_folder, write_bytes, xxh64)
from test_bad_inputs import cut_to_empty

DSCACHE_TRAIN = os.environ.get("DSCACHE_TRAIN", "")

# The table (docs/OPERATIONS.md): never renumbered.
OK, ERROR, USAGE, BAD_SOURCE, OUTPUT_EXISTS, CORRUPTION, LOCKED, NO_SPACE = range(8)
DISTRIBUTED, DIVERGED = 8, 9

BENCH = ["--seconds", "0.1", "--decode-samples", "8", "--rows", "memcpy"]


def run_prog(prog, args, env=None, fsize=None):
    """Runs PROG ARGS; with FSIZE, under a file size limit of that many bytes (ulimit -f)."""
    e = dict(os.environ)
    for k in [k for k in e if k.startswith("DSCACHE_TEST_")]:
        del e[k]
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RESTART_COUNT"):
        e.pop(k, None)
    e.update(env or {})

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    cmd = [prog] + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=TIMEOUT_S,
                           preexec_fn=limit if fsize else None)
    except subprocess.TimeoutExpired as x:
        raise Failure(f"timed out after {TIMEOUT_S}s: {' '.join(cmd)}") from x
    return p


@contextmanager
def flocked(path):
    """Holds an exclusive flock on PATH (created) as another build, merge or trainer would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def check_rows(prog, rows):
    """ROWS: (kind, code, needle, make) with make() -> (args, run_prog keywords) or, for a row
    that must hold a lock while it runs, (args, keywords, lock path). Checks every row and
    reports all that fail at once."""
    failed = []
    for kind, code, needle, make in rows:
        made = make()
        args, kw = made[0], made[1]
        if len(made) == 3:
            with flocked(made[2]):
                p = run_prog(prog, args, **kw)
        else:
            p = run_prog(prog, args, **kw)
        text = p.stdout + p.stderr
        ok = p.returncode == code and needle in text
        print(f"{'ok  ' if ok else 'FAIL'} {Path(prog).name} {kind}: exit {p.returncode} "
              f"(want {code})")
        if not ok:
            failed.append(f"{kind}: {' '.join(map(str, args))}\n  want exit {code} and "
                          f"{needle!r}, got exit {p.returncode}:\n{text}")
    if failed:
        raise Failure("\n".join(failed))


class Fixtures:
    """Sources and caches the rows share, made once per case in TMP."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.n = 0

    def fresh(self, name):
        self.n += 1
        return self.tmp / f"{name}{self.n}"

    def src(self):
        s = self.tmp / "src"
        if not s.exists():
            make_simple_folder(s, ["a", "b", "c"], 8, (16, 16), seed=4)
        return s

    def bad_src(self):
        """A folder with one file that does not decode (a skip; --strict refuses it)."""
        s = self.tmp / "bad-src"
        if not s.exists():
            make_simple_folder(s, ["a", "b"], 4, (16, 16), seed=5)
            write_bytes(s / "a" / "broken.png", b"\x89PNG\r\n\x1a\n not a png")
        return s

    def table(self):
        """A CSV table (image_path, label, n) over the folder source's images."""
        t = self.tmp / "table.csv"
        if not t.exists():
            imgs = sorted(p.relative_to(self.src()) for p in self.src().rglob("*.png"))
            t.write_text("image_path,label,n\n" +
                         "".join(f"src/{p},{p.parts[0]},{k}\n" for k, p in enumerate(imgs)))
        return t

    def cache(self, name="cache", src=None, *opts):
        out = self.tmp / name
        if not out.exists():
            build(src or self.src(), out, "--size", "16", *opts)
        return out

    def parts(self, src=None, name="part"):
        ps = [self.tmp / f"{name}{i}" for i in range(2)]
        for i, p in enumerate(ps):
            if not p.exists():
                build(src or self.src(), p, "--size", "16", "--part", f"{i}/2")
        return ps

    def corrupt(self):
        """A cache whose first shard is cut short (the manifest says more bytes)."""
        d = self.tmp / "corrupt"
        if not d.exists():
            build(self.src(), d, "--size", "16")
            shard = d / "images-00000.npy"
            shard.write_bytes(shard.read_bytes()[:-100])
        return d

    def flipped(self):
        """A cache with one flipped byte in a sample: verify finds it (a reported problem)."""
        d = self.tmp / "flipped"
        if not d.exists():
            build(self.src(), d, "--size", "16")
            shard = d / "images-00000.npy"
            b = bytearray(shard.read_bytes())
            b[-1] ^= 0xFF
            shard.write_bytes(bytes(b))
        return d

    def bad_manifest(self):
        d = self.tmp / "badmanifest"
        if not d.exists():
            build(self.src(), d, "--size", "16")
            (d / "manifest.json").write_text("{ not json")
        return d

    def empty(self):
        """A valid cache of count 0 (FORMAT.md allows it; a build refuses to make one)."""
        d = self.tmp / "empty"
        if d.exists():
            return d
        build(self.src(), d, "--size", "16")
        cut_to_empty(d)
        return d

    def ragged(self):
        d = self.tmp / "ragged"
        if not d.exists():
            build(self.src(), d, "--layout", "ragged", "--max-side", "12")
        return d

    def targets_cache(self):
        """A CSV table's cache of 16 samples with fields t (int64 0, 1, 2, 0, ...: not all 0/1)
        and y (float32 3e38, whose squared error overflows: every step's loss is inf)."""
        d = self.tmp / "targets-cache"
        if not d.exists():
            src = self.tmp / "targets-src"
            rels = make_simple_folder(src, ["a", "b"], 8, (16, 16), seed=6)
            rows = [f"{r},{r.split('/')[0]},{i % 3},3e38" for i, r in enumerate(rels)]
            (src / "table.csv").write_text("image_path,label,t,y\n" + "\n".join(rows) + "\n")
            build(src / "table.csv", d, "--size", "16")
        return d

    def nan_targets_cache(self):
        """targets_cache() with y of sample 3 NaN, as a cache written before the Writer refused
        non-finite values: the field file, its checksums.npy column and the manifest agree."""
        d = self.tmp / "nan-targets-cache"
        if not d.exists():
            shutil.copytree(self.targets_cache(), d)
            m = json.loads((d / "manifest.json").read_text())
            columns = 1 + len(m["fields"])
            j = [f["name"] for f in m["fields"]].index("y")
            nan = struct.pack("<f", float("nan"))
            values = m["shards"][0]["fields"]["y"]["values"]
            values["xxh64"] = npy_patch(d / values["file"], 3 * 4, nan)
            sums = m["files"]["checksums"]
            sums["xxh64"] = npy_patch(d / sums["file"], (3 * columns + 1 + j) * 8,
                                      struct.pack("<Q", xxh64(nan)))
            (d / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
        return d


def npy_patch(path, at, data):
    """Writes DATA at byte AT of a version 1 .npy file's array; returns its new XXH64 (hex)."""
    b = bytearray(path.read_bytes())
    start = 10 + struct.unpack_from("<H", b, 8)[0]
    b[start + at:start + at + len(data)] = data
    path.write_bytes(bytes(b))
    return f"{xxh64(bytes(b)):016x}"


def lock_of(out):
    """The lock file of a build or merge of OUT (dscache/lock.h: beside it, not inside)."""
    return out.parent / f".{out.name}.lock"


def case_exit_build(tmp):
    f = Fixtures(tmp)
    fifo = tmp / "list.csv"
    os.mkfifo(fifo)
    huge = tmp / "huge-images-idx3-ubyte"  # a header claiming ~2^64 pixel bytes
    huge.write_bytes(bytes.fromhex("00000803ffffffff0001000000010000"))
    (tmp / "huge-labels-idx1-ubyte").write_bytes(bytes.fromhex("00000801ffffffff"))
    (tmp / "file").write_bytes(b"x")
    # 24 samples of 16x16x3 (18 KiB) in one shard: a 4 KiB file size limit stops the first.
    rows = [
        ("ok", OK, "built 24 samples",
         lambda: (["build", f.src(), f.fresh("out"), "--size", "16"], {})),
        ("usage: unknown flag", USAGE, "--bogus",
         lambda: (["build", f.src(), f.fresh("out"), "--size", "16", "--bogus"], {})),
        ("usage: bad value", USAGE, "--size '0'",
         lambda: (["build", f.src(), f.fresh("out"), "--size", "0"], {})),
        # Found only once the source kind is known, and thrown as a usage error (it used to be
        # told from a path starting with '-').
        ("usage: --size needed by the source kind", USAGE, "--size: is required",
         lambda: (["build", f.src(), f.fresh("out")], {})),
        # An option that does not fit the table, found once it is read: usage too (it exited 1
        # for a missing column while a misspelled KIND exited 2).
        ("usage: --field KIND misspelled", USAGE, "--field 'n=msak'",
         lambda: (["build", f.table(), f.fresh("out"), "--size", "16", "--field", "n=msak"], {})),
        ("usage: --field naming no column", USAGE, "the table has no column 'mask'",
         lambda: (["build", f.table(), f.fresh("out"), "--size", "16", "--field", "mask=mask"],
                  {})),
        ("usage: --image-column naming no column", USAGE, "the table has no column 'img'",
         lambda: (["build", f.table(), f.fresh("out"), "--size", "16", "--image-column", "img"],
                  {})),
        ("usage: a table option for a folder", USAGE, "apply to .csv/.tsv/.jsonl tables",
         lambda: (["build", f.src(), f.fresh("out"), "--size", "16", "--field", "n=int"], {})),
        ("not found: SOURCE", ERROR, "no_such_src",
         lambda: (["build", tmp / "no_such_src", f.fresh("out"), "--size", "16"], {})),
        ("I/O: OUTPUT under a regular file", ERROR, "Not a directory",
         lambda: (["build", f.src(), tmp / "file" / "out", "--size", "16"], {})),
        ("unsupported: idx larger than memory", ERROR, "more than memory can hold",
         lambda: (["build", huge, f.fresh("out")], {})),
        ("corruption: a FIFO as the list file", CORRUPTION, "not a regular file (a FIFO)",
         lambda: (["build", fifo, f.fresh("out"), "--size", "16"], {})),
        ("bad source under --strict", BAD_SOURCE, "broken.png",
         lambda: (["build", f.bad_src(), f.fresh("out"), "--size", "16", "--strict"], {})),
        ("output exists", OUTPUT_EXISTS, "--force",
         lambda: (["build", f.src(), f.cache(), "--size", "16"], {})),
        ("locked", LOCKED, "lock",
         lambda: (["build", f.src(), tmp / "locked", "--size", "16"], {},
                  lock_of(tmp / "locked"))),
        ("no space: file size limit", NO_SPACE, "--resume",
         lambda: (["build", f.src(), f.fresh("out"), "--size", "16"], {"fsize": 4096})),
    ]
    check_rows(DSCACHE, rows)


def case_exit_merge(tmp):
    f = Fixtures(tmp)

    def corrupt_parts():
        ps = f.parts(name="cpart")
        shard = ps[1] / "images-00000.npy"
        shard.write_bytes(shard.read_bytes()[:-100])
        return ps
    rows = [
        ("ok", OK, "merged 2 parts", lambda: (["merge", *f.parts(), f.fresh("out")], {})),
        ("usage: unknown flag", USAGE, "--bogus",
         lambda: (["merge", *f.parts(), f.fresh("out"), "--bogus"], {})),
        ("usage: the parts do not make one cache", USAGE, "part",
         lambda: (["merge", f.parts()[0], f.parts()[0], f.fresh("out")], {})),
        ("not found: a part", ERROR, "no_such_part",
         lambda: (["merge", f.parts()[0], tmp / "no_such_part", f.fresh("out")], {})),
        ("corruption: a part's shard cut short", CORRUPTION, "images-00000.npy",
         lambda: (["merge", *corrupt_parts(), f.fresh("out")], {})),
        ("bad source under --strict: a part skipped entries", BAD_SOURCE, "skipped",
         lambda: (["merge", *f.parts(f.bad_src(), "bpart"), f.fresh("out"), "--strict"], {})),
        ("output exists", OUTPUT_EXISTS, "--force",
         lambda: (["merge", *f.parts(), f.cache()], {})),
        ("locked", LOCKED, "lock",
         lambda: (["merge", *f.parts(), tmp / "locked"], {}, lock_of(tmp / "locked"))),
        # The shards are hard-linked; labels.npy (24 samples: 320 bytes) is past a 256 B limit.
        ("no space: file size limit", NO_SPACE, "--resume",
         lambda: (["merge", *f.parts(), f.fresh("out")], {"fsize": 256})),
    ]
    check_rows(DSCACHE, rows)


def case_exit_inspect(tmp):
    f = Fixtures(tmp)
    rows = [
        ("ok", OK, "samples    24", lambda: (["inspect", f.cache()], {})),
        ("usage: unknown flag", USAGE, "--bogus", lambda: (["inspect", f.cache(), "--bogus"], {})),
        ("usage: --sample out of range", USAGE, "out of range",
         lambda: (["inspect", f.cache(), "--sample", "24"], {})),
        ("not found: CACHE", ERROR, "no_such_cache",
         lambda: (["inspect", tmp / "no_such_cache"], {})),
        ("I/O: --out not writable", ERROR, "cannot write the image",
         lambda: (["inspect", f.cache(), "--sample", "0", "--out", tmp / "nodir" / "x.png"], {})),
        ("corruption: a shard cut short", CORRUPTION, "images-00000.npy",
         lambda: (["inspect", f.corrupt()], {})),
        ("corruption: manifest not JSON", CORRUPTION, "manifest.json",
         lambda: (["inspect", f.bad_manifest()], {})),
        ("empty cache: valid", OK, "samples    0", lambda: (["inspect", f.empty()], {})),
        ("empty cache: --grid has nothing to show", OK, "holds no samples",
         lambda: (["inspect", f.empty(), "--grid", "4", "--out", tmp / "g.png"], {})),
    ]
    check_rows(DSCACHE, rows)


def case_exit_verify(tmp):
    f = Fixtures(tmp)
    rows = [
        ("ok", OK, "OK: 24 samples", lambda: (["verify", f.cache()], {})),
        ("usage: unknown flag", USAGE, "--bogus", lambda: (["verify", f.cache(), "--bogus"], {})),
        ("usage: bad value", USAGE, "--threads",
         lambda: (["verify", f.cache(), "--threads", "-1"], {})),
        ("not found: CACHE", ERROR, "no_such_cache",
         lambda: (["verify", tmp / "no_such_cache"], {})),
        ("corruption: a flipped byte", CORRUPTION, "CORRUPT",
         lambda: (["verify", f.flipped()], {})),
        ("corruption: a shard cut short", CORRUPTION, "images-00000.npy",
         lambda: (["verify", f.corrupt()], {})),
        ("corruption: manifest not JSON", CORRUPTION, "manifest.json",
         lambda: (["verify", f.bad_manifest()], {})),
        ("empty cache: valid", OK, "OK: 0 samples", lambda: (["verify", f.empty()], {})),
    ]
    check_rows(DSCACHE, rows)


def case_exit_bench(tmp):
    f = Fixtures(tmp)
    rows = [
        ("ok", OK, "memcpy", lambda: (["bench", f.cache(), *BENCH], {})),
        ("usage: unknown flag", USAGE, "--bogus", lambda: (["bench", f.cache(), "--bogus"], {})),
        ("usage: bad value", USAGE, "--batch", lambda: (["bench", f.cache(), "--batch", "0"], {})),
        ("not found: CACHE", ERROR, "no_such_cache",
         lambda: (["bench", tmp / "no_such_cache", *BENCH], {})),
        ("unsupported: a ragged cache", ERROR, "fixed-layout",
         lambda: (["bench", f.ragged(), *BENCH], {})),
        ("corruption: a shard cut short", CORRUPTION, "images-00000.npy",
         lambda: (["bench", f.corrupt(), *BENCH], {})),
        ("corruption: manifest not JSON", CORRUPTION, "manifest.json",
         lambda: (["bench", f.bad_manifest(), *BENCH], {})),
        ("empty cache: nothing to time", OK, "holds no samples",
         lambda: (["bench", f.empty(), *BENCH], {})),
    ]
    check_rows(DSCACHE, rows)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_exit_train(tmp):
    if not DSCACHE_TRAIN or not os.access(DSCACHE_TRAIN, os.X_OK):
        raise Skip("DSCACHE_TRAIN is not set to a dscache-train binary (trainer not built)")
    f = Fixtures(tmp)

    def train(cache, *extra, out=None, batch=8):
        a = ["--train", cache, "--batch", batch, "--threads", "1", "--seed", "1", "--no-progress"]
        return a + (["--output", out] if out else []) + list(extra)

    def finished_run(name, *extra):
        out = tmp / name
        if not out.exists():
            p = run_prog(DSCACHE_TRAIN, train(f.cache(), *extra, out=out))
            check(p.returncode == 0, f"fixture run {name}: exit {p.returncode}: {p.stderr}")
        return out

    def bad_checkpoint():
        out = finished_run("badckpt")
        for name in ("checkpoint.pt", "checkpoint.prev.pt"):
            if (out / name).exists():
                (out / name).write_bytes(b"not a checkpoint")
        return out

    rows = [
        ("ok", OK, "", lambda: (train(f.cache()), {})),
        ("usage: unknown flag", USAGE, "--bogus", lambda: (train(f.cache(), "--bogus"), {})),
        ("usage: bad value", USAGE, "--batch", lambda: (train(f.cache(), batch=0), {})),
        ("usage: --resume with other run-defining settings", USAGE,
         "--optimizer sgd (this run: adamw)",
         lambda: (train(f.cache(), "--resume", "--optimizer", "adamw", out=finished_run("run")),
                  {})),
        ("usage: --resume that cannot keep the global batch", USAGE,
         "the checkpoint's global batch is 8 samples",
         lambda: (train(f.cache(), "--resume", batch=16, out=finished_run("run")), {})),
        ("not found: the cache", ERROR, "no_such_cache",
         lambda: (train(tmp / "no_such_cache"), {})),
        ("corruption: a shard cut short", CORRUPTION, "images-00000.npy",
         lambda: (train(f.corrupt()), {})),
        ("corruption: manifest not JSON", CORRUPTION, "manifest.json",
         lambda: (train(f.bad_manifest()), {})),
        ("corruption: no checkpoint verifies", CORRUPTION, "no usable checkpoint",
         lambda: (train(f.cache(), "--resume", out=bad_checkpoint()), {})),
        ("output holds a run", OUTPUT_EXISTS, "holds a run",
         lambda: (train(f.cache(), out=finished_run("run")), {})),
        ("locked", LOCKED, "in use by another dscache-train",
         lambda: (train(f.cache(), out=tmp / "locked"), {},
                  tmp / "locked" / "dscache-train.lock")),
        # The metrics line fits in 16 KiB, the checkpoint does not.
        ("no space: file size limit", NO_SPACE, "File too large",
         lambda: (train(f.cache(), out=f.fresh("out")), {"fsize": 16384})),
        ("distributed: a rank missing at rendezvous", DISTRIBUTED, "missing rank(s): 1",
         lambda: (train(f.cache(), "--dist-timeout", "1"),
                  {"env": {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(free_port())}})),
        ("diverged: inf/NaN steps in a row", DIVERGED, "inf/NaN for 5 consecutive steps",
         lambda: (train(f.cache(), "--epochs", "5", "--lr", "1e12", "--momentum", "0", batch=2),
                  {})),
        # issue 38: bad values found once the cache is read are usage (2), as the table says
        ("usage: --targets naming no field", USAGE, "--targets: field 'nope' does not exist",
         lambda: (train(f.targets_cache(), "--task", "regress", "--targets", "nope"), {})),
        ("usage: a multilabel target other than 0/1", USAGE,
         "; --task multilabel needs targets of 0 or 1",
         lambda: (train(f.targets_cache(), "--task", "multilabel", "--targets", "t"), {})),
        ("usage: a non-finite regression target", USAGE,
         "--targets: field 'y' of sample 3 in --train",
         lambda: (train(f.nan_targets_cache(), "--task", "regress", "--targets", "y"), {})),
        ("distributed: MASTER_ADDR does not resolve", DISTRIBUTED,
         "MASTER_ADDR=no-such-host.invalid does not resolve",
         lambda: (train(f.cache(), "--dist-timeout", "100"),
                  {"env": {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "no-such-host.invalid",
                           "MASTER_PORT": str(free_port())}})),
        ("diverged: every step skipped (2, fewer than 5 in a row)", DIVERGED,
         "all 2 optimizer steps were skipped",
         lambda: (train(f.targets_cache(), "--task", "regress", "--targets", "y", "--precision", "fp32"),
                  {})),
    ]
    check_rows(DSCACHE_TRAIN, rows)


CASES = {
    "exit_build": case_exit_build,
    "exit_merge": case_exit_merge,
    "exit_inspect": case_exit_inspect,
    "exit_verify": case_exit_verify,
    "exit_bench": case_exit_bench,
    "exit_train": case_exit_train,
}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
