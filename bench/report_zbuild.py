#!/usr/bin/env python3
"""Summarise a compressed-build benchmark CSV (from bench/zbuild.sh) as markdown.

    report_zbuild.py CSV [--docs docs/benchmarks.md] [--chart bench-zbuild.png]

Prints the section to stdout; with --docs, also replaces (or appends) the section
"## Build: linux corpus, compressed" in that file. Standard library only.

Tools are named ALGO-CLUSTER rows (sealfs-lz4hc-64k, mkfs.erofs-lz4hc-64k, ...). Each row is compared
with mkfs.erofs at the same cluster size (lz4hc: the only algorithm erofs-utils 1.5 has) and with
mksquashfs of the same algorithm and block size.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_build import fmt_mib, load, paired, replace_section, summarise  # noqa: E402

HEADING = "## Build: linux corpus, compressed"
TARGETS = {"time": 0.5, "size": 1.0}  # sealfs / mkfs.erofs, from shared benchmarks.md


def split(tool):
    """'mkfs.erofs-lz4hc-64k' -> ('mkfs.erofs', 'lz4hc', '64k'); a size row ('sealfs-fast')
    -> ('sealfs-fast', '', ''), listed without ratios."""
    parts = tool.rsplit("-", 2)
    return tuple(parts) if len(parts) == 3 else (tool, "", "")


def div(a, b):
    return a / b if b else float("nan")


def ratio_row(stats, t, base, target):
    s, b = stats[t], stats[base]
    pt = [x for x in paired(stats, t, base, "wall_s")]
    rng = f" [{min(pt):.2f}–{max(pt):.2f}]" if pt else ""
    return (f"| {t} / {base} | {div(s['wall_med'], b['wall_med']):.3f}{rng} | "
            f"{div(s['size_med'], b['size_med']):.4f} | {div(s['rss_med'], b['rss_med']):.2f} | {target} |")


def cpu_medians(rows):
    """Median user + system CPU seconds per tool, for CSVs that have them."""
    by = {}
    for r in rows:
        if r.get("user_s") and r.get("sys_s"):
            by.setdefault(r["tool"], []).append(float(r["user_s"]) + float(r["sys_s"]))
    return {t: statistics.median(v) for t, v in by.items()}


def section(meta, tools, stats, csv_rel, chart, rows_of=()):
    out = [HEADING, ""]
    out.append(f"Measured {meta.get('date', '?')} with `bench/zbuild.sh`; raw runs in `{csv_rel}`.")
    out.append("")
    out.append(f"- Machine: {meta.get('machine', '?')}")
    la = meta.get("load average at start", "?")
    lb = meta.get("load average at end", "?")
    try:
        quiet = float(la.split()[0]) < 1.0
    except (ValueError, IndexError):
        quiet = False
    if quiet:
        out.append(
            f"- Load: nothing else ran (load average {la} at the start; {lb} at the end, which is the "
            "benchmark's own multi-threaded builds, on 2 cores). Per-round ratios are shown in brackets.")
    else:
        out.append(
            f"- Load: other builds ran on this machine during the measurement (load average {la} at the "
            f"start, {lb} at the end, on 2 cores). Every tool suffers, but the multi-threaded ones "
            "(sealfs, mksquashfs) lose more than the single-threaded mkfs.erofs when a core is taken, "
            "so the time ratios are pessimistic for sealfs. Per-round ratios are shown in brackets.")
    out.append(f"- Corpus and mode: {meta.get('benchmark', '?')}")
    nruns = min(s["runs"] for s in stats.values())
    out.append(
        f"- Method: one untimed read of the corpus, one untimed warm-up build per tool, then {nruns} "
        "timed rounds, tools interleaved within each round; image written to a real disk "
        "(page cache, no fsync by the harness) and deleted after each run. "
        "Wall time and peak RSS from GNU time, size from `stat -c %s`. sealfs images are sealed "
        "(Merkle tree and trailer included in time and size).")
    out.append("- Versions: " + "; ".join(
        sorted({f"`{meta.get('version ' + t, '?')}`" for t in tools})))
    out.append("- Commands:")
    for t in tools:
        out.append(f"  - {t}: `{meta.get('command ' + t, '?')}`")
    out.append("")
    cpu = cpu_medians(rows_of)
    out.append("| tool | median time (s) | min (s) | max (s) | median CPU, user + sys (s) | median peak RSS (MiB) | image size (bytes) | image size (MiB) |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in tools:
        s = stats[t]
        size = f"{int(s['size_med']):,}"
        if s["size_min"] != s["size_max"]:
            size += f" (varies: {s['size_min']:,}–{s['size_max']:,})"
        c = f"{cpu[t]:.2f}" if t in cpu else "not recorded"
        out.append(
            f"| {t} | {s['wall_med']:.2f} | {s['wall_min']:.2f} | {s['wall_max']:.2f} | {c} | "
            f"{fmt_mib(s['rss_med'], 'kib')} | {size} | {fmt_mib(s['size_med'], 'bytes')} |")
    out.append("")
    out.append("Ratios (ratio of medians; range of the per-round ratios in brackets):")
    out.append("")
    out.append("| ratio | time | image size | peak RSS | target |")
    out.append("|---|---:|---:|---:|---|")
    for t in tools:
        name, alg, cluster = split(t)
        if name != "sealfs":
            continue
        erofs = f"mkfs.erofs-lz4hc-{cluster}"
        squash = f"mksquashfs-{alg}-{cluster}"
        if erofs in stats:
            if alg == "lz4hc":
                rt = div(stats[t]["wall_med"], stats[erofs]["wall_med"])
                rs = div(stats[t]["size_med"], stats[erofs]["size_med"])
                ok_t = "met" if rt <= TARGETS["time"] else "**not met**"
                ok_s = "met" if rs <= TARGETS["size"] else "**not met**"
                target = (f"time ≤ {TARGETS['time']} ({ok_t}); size ≤ {TARGETS['size']} ({ok_s}), "
                          "same algorithm, level and cluster size")
            else:
                target = "no zstd in erofs-utils 1.5: against its lz4hc, context only"
            out.append(ratio_row(stats, t, erofs, target))
        if squash in stats:
            out.append(ratio_row(stats, t, squash, "peer, context only"))
    for t in tools:
        name, alg, cluster = split(t)
        erofs = f"mkfs.erofs-lz4hc-{cluster}"
        if name == "mksquashfs" and erofs in stats:
            out.append(ratio_row(stats, t, erofs, "peer against peer, context only"))
    out.append("")
    if chart:
        out.append(f"![Compressed build benchmark: median time with min/max, and image size]({chart})")
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--docs", help="markdown file whose section to replace")
    ap.add_argument("--chart", help="chart path relative to the docs file")
    a = ap.parse_args()
    meta, rows = load(a.csv)
    if not rows:
        sys.exit("report_zbuild: no runs in " + a.csv)
    tools, stats = summarise(rows)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    csv_rel = os.path.relpath(os.path.abspath(a.csv), repo)
    text = section(meta, tools, stats, csv_rel, a.chart, rows)
    print(text)
    if a.docs:
        import report_build
        report_build.HEADING = HEADING
        replace_section(a.docs, text)


if __name__ == "__main__":
    main()
