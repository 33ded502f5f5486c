"""bench/scale.py's report: per phase the slope of time and memory against N (log-log, and
between the two largest sizes), the table, the goals' verdicts and the chart."""
import math

import numpy as np


STARTUP = ("inspect", "py_open", "loader_first", "dl_first", "train_first")


def slope(ns, vs):
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, vs) if v and v > 0]
    if len(pts) < 2:
        return None
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0])


def summarize(results, sizes):
    names = []
    for n in sizes:
        for k in results[str(n)]["phases"]:
            if k not in names:
                names.append(k)
    lo, hi = str(min(sizes)), str(max(sizes))
    summary = {}
    for k in names:
        have = [n for n in sizes if k in results[str(n)]["phases"]]
        t = [results[str(n)]["phases"][k]["wall_s"] for n in have]
        m = [results[str(n)]["phases"][k]["maxrss_kib"] for n in have]
        s = {"time_slope": slope(have, t), "maxrss_slope": slope(have, m),
             # the last two sizes: at the smallest N a process's fixed start-up weighs most,
             # so the fit over every size understates where the cost is heading
             "time_slope_top": slope(have[-2:], t[-2:]) if len(have) > 2 else None}
        if lo != hi and k in results[lo]["phases"] and k in results[hi]["phases"]:
            a_, b_ = results[lo]["phases"][k], results[hi]["phases"][k]
            dn = int(hi) - int(lo)
            s["maxrss_b_per_sample"] = round((b_["maxrss_kib"] - a_["maxrss_kib"]) * 1024 / dn, 1)
            s["anon_b_per_sample"] = round((b_["anon_kib"] - a_["anon_kib"]) * 1024 / dn, 1)
        summary[k] = s
    return names, summary


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(results, sizes, names, summary):
    head = f"{'phase':13s}" + "".join(f" | N={n:<8d} s   maxrss  anon" for n in sizes)
    head += " | slope t  (top)  slope rss  B/sample rss  anon"
    print(head)
    print("-" * len(head))
    for k in names:
        line = f"{k:13s}"
        for n in sizes:
            d = results[str(n)]["phases"].get(k)
            if d is None:
                line += f" | {'':25s}"
            else:
                line += (f" | {d['wall_s']:8.3f} {d['maxrss_kib'] / 1024:7.1f}M "
                         f"{d['anon_kib'] / 1024:6.1f}M")
        s = summary[k]
        line += (f" | {fmt(s['time_slope'], '7.3f')} {fmt(s.get('time_slope_top'), '6.3f')} "
                 f"{fmt(s['maxrss_slope'], '9.3f')} "
                 f"{fmt(s.get('maxrss_b_per_sample'), '12.1f')} "
                 f"{fmt(s.get('anon_b_per_sample'), '6.1f')}")
        print(line)


def print_goals(results, sizes, summary, coco):
    """Each phase against issue 33's goals; the 1.28M goals are judged at the largest N run."""
    top = str(max(sizes))
    print(f"goals (issue 33), at N = {', '.join(str(n) for n in sizes)}:")
    for k, s in summary.items():
        d = results[top]["phases"].get(k)
        notes = []
        t = s["time_slope"]
        if t is not None:
            notes.append(f"time slope {t:.2f} {'<=' if t <= 1.05 else '>'} 1.05")
        top_t = s.get("time_slope_top")
        if top_t is not None:
            notes.append(f"(last two sizes: {top_t:.2f})")
        for key in ("maxrss_b_per_sample", "anon_b_per_sample"):
            v = s.get(key)
            if v is not None:
                window = " (build: in-flight window exempt)" if "build" in k else ""
                notes.append(f"{key.split('_')[0]} {v:.0f} B/sample "
                             f"{'<=' if v <= 64 else '>'} 64{window}")
        if k in STARTUP and d:
            notes.append(f"{d['wall_s']:.2f} s at N={top} (goal <= 1 s at 1.28M)")
        if k == "merge" and d and "merge_over_copy" in d:
            notes.append(f"merge / cp -r = {d['merge_over_copy']:.2f} at N={top} (goal <= 2 at "
                         f"1.28M)")
        print(f"  {k:13s} " + "; ".join(notes))
    for c in coco or ():
        for k, d in c["phases"].items():
            print(f"  {k:13s} {d['maxrss_kib'] / 1024:.0f} MiB peak at {c['images']} images / "
                  f"{c['annotations']} annotations (goal <= 1 GB at 118,287 / 860,001)")
    if coco and len(coco) >= 2 and coco[-1]["annotations"] < 860001:
        lo, hi = coco[0], coco[-1]
        for k in hi["phases"]:
            a_, b_ = lo["phases"][k]["maxrss_kib"], hi["phases"][k]["maxrss_kib"]
            per = (b_ - a_) / (hi["annotations"] - lo["annotations"])
            est = b_ + per * (860001 - hi["annotations"])
            print(f"  {k:13s} linear extrapolation (not measured) to 860,001 annotations: "
                  f"~{est / 1024:.0f} MiB ({per * 1024:.0f} B per annotation, images in step)")


def chart(path, results, sizes, names, summary, two_points):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(13, 8))
    for ax, key, scale, label, sk in ((axes[0], "wall_s", 1, "wall time (s)", "time_slope"),
                                      (axes[1], "maxrss_kib", 1 / 1024, "peak RSS (MiB)",
                                       "maxrss_slope")):
        colors = plt.get_cmap("tab20").colors
        for j, k in enumerate(names):
            have = [n for n in sizes if k in results[str(n)]["phases"]]
            vals = [results[str(n)]["phases"][k][key] * scale for n in have]
            s = summary[k][sk]
            ax.plot(have, vals, marker="osD^v"[j % 5], linestyle=("-", "--", ":")[j % 3],
                    color=colors[j % len(colors)],
                    label=f"{k} ({'-' if s is None else f'{s:.2f}'})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("samples N")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, title="phase (fitted slope" + (", from 2 points)" if two_points
                                                               else ")"),
                  title_fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
    axes[0].set_title("time against N")
    axes[1].set_title("peak RSS (ru_maxrss) against N")
    fig.suptitle("dscache scale (bench/scale.py, issue 33): " +
                 ", ".join(f"{n:,}" for n in sizes) + " samples")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")
