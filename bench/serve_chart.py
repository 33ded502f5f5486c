#!/usr/bin/python3
"""Serving chart: dscache's serving rows and the PyTorch peer recipes as one bar chart.

A horizontal bar chart of samples/s on a log scale: every row of `dscache bench --json`'s "rows"
(name + threads) and every peer recipe of serve_peers.py's JSON (the best epoch of each
recipe/worker count), labelled with their values. The memcpy ceiling is drawn as a dashed
reference line at memcpy_gbps * 1e9 / sample_bytes samples/s when the dscache JSON has
"sample_bytes" (or the peers JSON does); otherwise it is left out. The title names the machine
(nproc and CPU model from /proc/cpuinfo).

Usage: serve_chart.py --dscache DSCACHE_JSON --peers PEERS_JSON --out chart.png [--title T]
Run it with Debian's /usr/bin/python3 (python3-matplotlib); Agg backend, no display needed.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RECIPE_LABELS = {
    "decode": "PyTorch DecodeDataset (imread+resize)",
    "keep": "PyTorch KeepDataset (decode once, dict)",
    "mmap": "PyTorch MmapDataset (np.load mmap)",
}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"serve_chart: cannot read {what} JSON {path}: {e}")


def bars_from(ds, peers):
    """[(label, samples/s, group)] in display order, top to bottom."""
    bars = []
    for r in ds.get("rows", []):
        sps = r.get("samples_per_s")
        if sps is None or sps <= 0:
            continue
        t = r.get("threads")
        label = f"dscache: {r['name']}" + (f" ({t} thr)" if t is not None else "")
        bars.append((label, float(sps), "dscache"))
    best = {}
    order = []
    for r in peers.get("recipes", []):
        key = (r["name"], r["workers"])
        if key not in best:
            order.append(key)
        if key not in best or r["samples_per_s"] > best[key]["samples_per_s"]:
            best[key] = r
    for key in order:
        r = best[key]
        if r["samples_per_s"] <= 0:
            continue
        label = f"{RECIPE_LABELS.get(r['name'], r['name'])}, workers={r['workers']}"
        extra = []
        if r["epoch"] > 1:
            extra.append(f"epoch {r['epoch']}")
        if r.get("extrapolated"):
            extra.append("extrapolated")
        if r.get("subset") is not None:
            extra.append(f"subset {r['subset']}")
        if extra:
            label += " [" + ", ".join(extra) + "]"
        bars.append((label, float(r["samples_per_s"]), "peer"))
    return bars


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dscache", required=True, help="output of `dscache bench CACHE --json`")
    ap.add_argument("--peers", required=True, help="output of serve_peers.py --json")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--title", help="title (default: the machine)")
    args = ap.parse_args()

    ds = load(args.dscache, "dscache")
    peers = load(args.peers, "peers")
    bars = bars_from(ds, peers)
    if not bars:
        sys.exit("serve_chart: no rows with samples/s > 0 in either JSON")

    sample_bytes = ds.get("sample_bytes") or peers.get("sample_bytes")
    memcpy_sps = None
    if ds.get("memcpy_gbps") and sample_bytes:
        memcpy_sps = ds["memcpy_gbps"] * 1e9 / float(sample_bytes)

    colors = {"dscache": "#1f77b4", "peer": "#ff7f0e"}
    fig_h = 1.2 + 0.42 * len(bars)
    fig, ax = plt.subplots(figsize=(11, fig_h))
    ys = list(range(len(bars)))[::-1]
    vals = [b[1] for b in bars]
    ax.barh(ys, vals, color=[colors[b[2]] for b in bars], height=0.7)
    ax.set_yticks(ys)
    ax.set_yticklabels([b[0] for b in bars], fontsize=8)
    ax.set_xscale("log")
    lo = min(vals + ([memcpy_sps] if memcpy_sps else []))
    hi = max(vals + ([memcpy_sps] if memcpy_sps else []))
    ax.set_xlim(lo / 3, hi * 4)
    for y, v in zip(ys, vals):
        ax.text(v * 1.08, y, f"{v:,.0f}", va="center", fontsize=8)
    if memcpy_sps:
        ax.axvline(memcpy_sps, color="#d62728", linestyle="--", linewidth=1.2)
        ax.text(memcpy_sps, ys[0] + 0.55,
                f"memcpy ceiling {memcpy_sps:,.0f}/s ({ds['memcpy_gbps']:.1f} GB/s) ",
                color="#d62728", fontsize=8, va="bottom", ha="right")
    ax.set_ylim(-0.6, len(bars) - 0.1 + (0.6 if memcpy_sps else 0))
    shape = peers.get("shape")
    what = f"samples/s (log scale), batch {peers.get('batch', ds.get('batch', '?'))}"
    if shape:
        what += f", {shape[0]}x{shape[1]}x{shape[2]} uint8 samples"
    ax.set_xlabel(what)
    ax.grid(axis="x", which="both", alpha=0.25)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colors["dscache"], label="dscache (C++)"),
                       Patch(color=colors["peer"], label="PyTorch DataLoader recipes")],
              loc="lower right", fontsize=8)
    title = args.title or f"dscache serving vs PyTorch recipes — {os.cpu_count()} cores, {cpu_model()}"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out} ({len(bars)} bars"
          + (f", memcpy ceiling {memcpy_sps:,.0f} samples/s)" if memcpy_sps else ", no ceiling)"))


if __name__ == "__main__":
    main()
