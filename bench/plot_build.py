#!/usr/bin/env python3
"""Chart a build-benchmark CSV (from bench/build.sh).

    plot_build.py CSV OUT.png [TITLE]

Left: median wall time per tool with min/max whiskers. Right: image size.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, __import__("os").path.dirname(__file__))
from report_build import load, summarise  # noqa: E402

COLORS = {"sealfs": "#2b7bba", "mkfs.erofs": "#e08214", "mksquashfs": "#7f7f7f"}


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    meta, rows = load(sys.argv[1])
    tools, st = summarise(rows)
    colors = [COLORS.get(t, COLORS.get(t.split("-")[0], "#999999")) for t in tools]
    x = range(len(tools))

    title = sys.argv[3] if len(sys.argv) == 4 else "Build: linux corpus, uncompressed"
    wide = len(tools) > 4
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14 if wide else 10, 4.8 if wide else 4.2))
    med = [st[t]["wall_med"] for t in tools]
    lo = [st[t]["wall_med"] - st[t]["wall_min"] for t in tools]
    hi = [st[t]["wall_max"] - st[t]["wall_med"] for t in tools]
    bars = ax1.bar(x, med, color=colors, yerr=[lo, hi], capsize=6, ecolor="black")
    for b, v in zip(bars, med):
        ax1.annotate(f"{v:.1f} s", (b.get_x() + b.get_width() / 2, v), xytext=(12, 2),
                     textcoords="offset points", ha="left", va="bottom", fontsize=9)
    ax1.set_xticks(list(x), tools, rotation=30 if wide else 0, ha="right" if wide else "center",
                   fontsize=8 if wide else 10)
    ax1.set_ylabel("wall time (s), median, whiskers min/max")
    n = min(st[t]["runs"] for t in tools)
    ax1.set_title(f"Build time, warm cache ({n} runs)")
    ax1.set_ylim(0, max(st[t]["wall_max"] for t in tools) * 1.2)

    sizes = [st[t]["size_med"] / 2**20 for t in tools]
    bars = ax2.bar(x, sizes, color=colors)
    for b, v in zip(bars, sizes):
        ax2.annotate(f"{v:,.0f} MiB", (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                     textcoords="offset points", ha="center", va="bottom", fontsize=9)
    ax2.set_xticks(list(x), tools, rotation=30 if wide else 0, ha="right" if wide else "center",
                   fontsize=8 if wide else 10)
    ax2.set_ylabel("image size (MiB)")
    ax2.set_title("Image size")
    ax2.set_ylim(0, max(sizes) * 1.15)

    fig.suptitle(title + " — " + meta.get("date", ""), fontsize=11)
    fig.text(0.5, 0.01, meta.get("machine", ""), ha="center", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
