#!/usr/bin/env python3
"""Summarise a build-benchmark CSV (from bench/build.sh) as markdown.

    report_build.py CSV [--docs docs/benchmarks.md] [--chart bench-build.png]

Prints the section to stdout; with --docs, also replaces (or appends) the section
"## Build: linux corpus, uncompressed" in that file. Standard library only.
"""
import argparse
import csv
import os
import re
import statistics
import sys

HEADING = "## Build: linux corpus, uncompressed"
BASE = "mkfs.erofs"
TARGETS = {"time": 0.5, "size": 1.0}  # sealfs / mkfs.erofs, from shared benchmarks.md


def load(path):
    meta, rows = {}, []
    with open(path, newline="") as f:
        lines = []
        for line in f:
            if line.startswith("#"):
                key, _, val = line[1:].strip().partition(": ")
                meta[key] = val
            elif line.strip():
                lines.append(line)
    for r in csv.DictReader(lines):
        rows.append(r)
    return meta, rows


def summarise(rows):
    tools = []
    by = {}
    for r in rows:
        t = r["tool"]
        if t not in by:
            tools.append(t)
            by[t] = []
        by[t].append(r)
    stats = {}
    for t in tools:
        rs = by[t]
        wall = [float(r["wall_s"]) for r in rs]
        rss = [int(r["peak_rss_kib"]) for r in rs]
        size = [int(r["image_bytes"]) for r in rs]
        stats[t] = {
            "runs": len(rs),
            "by_run": {r["run"]: r for r in rs},
            "wall_med": statistics.median(wall),
            "wall_min": min(wall),
            "wall_max": max(wall),
            "rss_med": statistics.median(rss),
            "size_med": statistics.median(size),
            "size_min": min(size),
            "size_max": max(size),
        }
    return tools, stats


def paired(stats, a, b, key):
    """Per-round ratios a/b over the rounds both tools ran (they ran back to back)."""
    ra, rb = stats[a]["by_run"], stats[b]["by_run"]
    out = []
    for run in ra:
        if run in rb and float(rb[run][key]) > 0:
            out.append(float(ra[run][key]) / float(rb[run][key]))
    return out


def fmt_mib(kib_or_bytes, unit):
    v = kib_or_bytes / (1024 if unit == "kib" else 1024 * 1024)
    return f"{v:,.0f}" if unit == "kib" else f"{v:,.1f}"


def section(meta, tools, stats, csv_rel, chart):
    out = [HEADING, ""]
    out.append(
        f"Measured {meta.get('date', '?')} with `bench/build.sh`; raw runs in `{csv_rel}`."
    )
    out.append("")
    out.append(f"- Machine: {meta.get('machine', '?')}")
    out.append(f"- Corpus and mode: {meta.get('benchmark', '?')}")
    nruns = min(s["runs"] for s in stats.values())
    out.append(
        f"- Method: one untimed read of the corpus, one untimed warm-up build per tool, then {nruns} "
        "timed rounds, tools interleaved within each round; image written to a real disk "
        "(page cache, no fsync by the harness) and deleted after each run. "
        "Wall time and peak RSS from GNU time, size from `stat -c %s`."
    )
    out.append("- Versions: " + "; ".join(
        f"{t}: `{meta.get('version ' + t, '?')}`" for t in tools))
    out.append("- Commands:")
    for t in tools:
        out.append(f"  - `{meta.get('command ' + t, '?')}`")
    out.append("")
    out.append("| tool | median time (s) | min (s) | max (s) | median peak RSS (MiB) | image size (bytes) | image size (MiB) |")
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for t in tools:
        s = stats[t]
        size = f"{int(s['size_med']):,}"
        if s["size_min"] != s["size_max"]:
            size += f" (varies: {s['size_min']:,}–{s['size_max']:,})"
        out.append(
            f"| {t} | {s['wall_med']:.2f} | {s['wall_min']:.2f} | {s['wall_max']:.2f} | "
            f"{fmt_mib(s['rss_med'], 'kib')} | {size} | {fmt_mib(s['size_med'], 'bytes')} |"
        )
    out.append("")
    if BASE in stats:
        out.append(f"Ratios against `{BASE}` (ratio of medians; range of the per-round ratios in brackets):")
        out.append("")
        out.append("| ratio | time | image size | peak RSS | target |")
        out.append("|---|---:|---:|---:|---|")
        b = stats[BASE]
        for t in tools:
            if t == BASE:
                continue
            s = stats[t]
            pt = paired(stats, t, BASE, "wall_s")
            rng = f" [{min(pt):.2f}–{max(pt):.2f}]" if pt else ""
            rt = s["wall_med"] / b["wall_med"]
            rs = s["size_med"] / b["size_med"]
            rr = s["rss_med"] / b["rss_med"]
            if t == "sealfs":
                ok_t = "met" if rt <= TARGETS["time"] else "**not met**"
                target = (f"time ≤ {TARGETS['time']} including the seal ({ok_t}); size includes the "
                          "Merkle tree and trailer, see sealfs-noseal for the EROFS bytes")
            elif t == "sealfs-noseal":
                ok_s = "met" if rs <= TARGETS["size"] else "**not met**"
                target = f"EROFS size ≤ {TARGETS['size']} ({ok_s}); time without the seal, context"
            else:
                target = "peer, context only"
            out.append(f"| {t} / {BASE} | {rt:.3f}{rng} | {rs:.4f} | {rr:.2f} | {target} |")
        if "sealfs" not in stats:
            out.append(f"| sealfs / {BASE} | not measured | not measured | not measured | "
                       f"time ≤ {TARGETS['time']}; size ≤ {TARGETS['size']} |")
        out.append("")
    if chart:
        out.append(f"![Build benchmark: median time with min/max, and image size]({chart})")
        out.append("")
    return "\n".join(out)


def replace_section(doc_path, text):
    if os.path.exists(doc_path):
        with open(doc_path) as f:
            doc = f.read()
    else:
        doc = (
            "# Benchmarks\n\n"
            "Measured by the scripts in `bench/` (method: `shared/benchmarks.md`). Every claim is a "
            "ratio against a peer measured in the same run, commands interleaved, median of at least "
            "5 runs after a warm-up, min and max shown. Absolute times are context only.\n\n"
        )
    pat = re.compile(r"^" + re.escape(HEADING) + r"[ \t]*\n.*?(?=^## |\Z)", re.M | re.S)
    if pat.search(doc):
        doc = pat.sub(lambda _: text + "\n", doc, count=1)
    else:
        if not doc.endswith("\n\n"):
            doc = doc.rstrip("\n") + "\n\n"
        doc += text + "\n"
    doc = doc.rstrip("\n") + "\n"
    with open(doc_path, "w") as f:
        f.write(doc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--docs", help="markdown file whose section to replace")
    ap.add_argument("--chart", help="chart path relative to the docs file")
    a = ap.parse_args()
    meta, rows = load(a.csv)
    if not rows:
        sys.exit("report_build: no runs in " + a.csv)
    tools, stats = summarise(rows)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    csv_rel = os.path.relpath(os.path.abspath(a.csv), repo)
    text = section(meta, tools, stats, csv_rel, a.chart)
    print(text)
    if a.docs:
        replace_section(a.docs, text)


if __name__ == "__main__":
    main()
