#!/usr/bin/python3
"""Writes a class-per-folder tree of random RGB PNGs for the shell tests:
ROOT/class<c>/<i>.png, CLASSES folders of PER_CLASS images of HEIGHT x WIDTH, from SEED.

Usage: write_pngs.py ROOT CLASSES PER_CLASS HEIGHT WIDTH SEED"""
import os
import sys

import cv2
import numpy as np

root, classes, per_class, h, w, seed = sys.argv[1], *map(int, sys.argv[2:7])
rng = np.random.default_rng(seed)
for c in range(classes):
    os.makedirs(f"{root}/class{c}", exist_ok=True)
    for i in range(per_class):
        path = f"{root}/class{c}/{i:02d}.png"
        if not cv2.imwrite(path, (rng.random((h, w, 3)) * 255).astype(np.uint8)):
            sys.exit(f"cannot write {path}")
