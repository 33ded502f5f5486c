#!/usr/bin/python3
"""dscache-train --task regress on an integer column (issue 34): a table's count column becomes
an int64 scalar field; regress takes it, read as float32, says so once (rank 0 alone), trains to
a finite loss (with --target-norm: the table's counts reach 2^40), and --val's same column takes no second note. A non-scalar target is still
refused naming the field. Registered by trainer/meson.build, which knows dscache-train.

Usage: test_train_int_targets.py CASE   (env DSCACHE, DSCACHE_TRAIN)
"""

import json
import math
import os
import subprocess
import sys

from cli_helpers import TIMEOUT_S, Skip, build, check, check_eq, load_manifest, main
from fields_helpers import make_table

NOTE = "--task regress: target count (int64) holds integers, read as float32"


def trainer():
    train = os.environ.get("DSCACHE_TRAIN", "")
    if not train:
        raise Skip("DSCACHE_TRAIN is not set to a dscache-train binary (trainer not built)")
    return train


def train_run(args):
    return subprocess.run([trainer()] + [str(a) for a in args] +
                          ["--no-progress", "--threads", "1", "--model", "cnn"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def case_regress_int_targets(tmp):
    trainer()
    make_table(tmp / "t")
    build(tmp / "t" / "list.csv", tmp / "cache", "--size", "24", "--quiet",
          "--field", "tags=multi-hot")
    count = next(f for f in load_manifest(tmp / "cache")["fields"] if f["name"] == "count")
    check_eq((count["kind"], count["dtype"]), ("scalar", "int64"), "the count column's field")
    out = tmp / "run"
    p = train_run(["--train", tmp / "cache", "--val", tmp / "cache", "--task", "regress",
                   "--targets", "count", "--target-norm", "--epochs", "2", "--batch", "4", "--output", out])
    check_eq(p.returncode, 0, f"dscache-train exit ({p.stderr})")
    check_eq(p.stderr.count(NOTE), 1, f"the note, once ({p.stderr})")
    check("rebuild with --field" not in p.stderr, f"still asks for a rebuild: {p.stderr}")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [x for x in lines if x.get("kind") == "epoch"]
    check_eq(len(epochs), 2, "epoch lines")
    for e in epochs:  # null: not finite
        check(all(isinstance(e[k], float) and math.isfinite(e[k])
                  for k in ("loss", "val_loss", "val_mae")) and e["skipped_steps"] == 0,
              f"epoch line {e}")
    card = json.loads((out / "model.json").read_text())
    check_eq(card.get("targets"), ["count"], "model.json targets")
    # A float column needs no note; a multi-hot array is still no regression target.
    p = train_run(["--train", tmp / "cache", "--task", "regress", "--targets", "score",
                   "--epochs", "1", "--batch", "4"])
    check_eq(p.returncode, 0, f"float target: exit ({p.stderr})")
    check("read as float32" not in p.stderr, f"a note for a float32 target: {p.stderr}")
    p = train_run(["--train", tmp / "cache", "--task", "regress", "--targets", "tags",
                   "--epochs", "1"])
    check_eq(p.returncode, 2, f"array target: exit ({p.stderr})")
    check("--targets: field 'tags'" in p.stderr and "needs scalars" in p.stderr,
          f"array target not named: {p.stderr}")


CASES = {"regress_int_targets": case_regress_int_targets}

if __name__ == "__main__":
    sys.exit(main(CASES, sys.argv))
