#!/usr/bin/env python3
"""The benchmark table of README.md, generated from the committed raw results in bench/results.

    bench/readme_table.py            print the table
    bench/readme_table.py --write    put it between the markers in README.md
    bench/readme_table.py --check    exit 1 if README.md's table is not what this prints
                                     (scripts/test.sh runs this, so the table cannot drift)

Every figure is computed here from the raw runs: medians, ratios, sizes, the number of runs, the
date and the machine (from a file's `# date:` and `# machine:` lines, or from its name and the
row's `machine` where the script that wrote it records none). Which run stands for a workload,
and which peers it is compared with, is chosen in ROWS below: current releases only (erofs-utils
1.9, squashfuse 0.6, mksquashfs, the kernel, fsverity-utils, rclone), each row shown against the
fastest of its peers as measured in that run. Older figures, and how each run was made, are in
docs/benchmarks.md. To update the README after a new run: point a row at the new file, run
`bench/readme_table.py --write`, commit both.
"""
import csv
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
README = os.path.join(REPO, "README.md")
BEGIN = "<!-- begin bench/readme_table.py: generated from bench/results; run it with --write, do not edit -->"
END = "<!-- end bench/readme_table.py -->"

LINUX = "`linux`"

# One row per workload. `file`: the raw results; `where`: column values selecting the workload's
# rows; `tool`: the column naming the tool; `value`: the time column (seconds, lower is better);
# `ours`: sealfs's tool; `peers`: {tool in the file: how the table names it}; `size`: the column of
# image sizes, for builds; `machine`: for files that do not name theirs.
ROWS = [
    dict(
        what=f"build {LINUX}, uncompressed, sealed",
        file="build-2026-11-26T213915Z.csv",
        tool="tool", value="wall_s", size="image_bytes",
        ours="sealfs",
        peers={"mkfs.erofs": "`mkfs.erofs` {version}"},
    ),
    dict(
        what=f"build {LINUX}, lz4hc 9, 64 KiB clusters, sealed",
        file="zbuild-2026-11-26T220139Z.csv",
        tool="tool", value="wall_s", size="image_bytes",
        ours="sealfs-lz4hc-64k",
        peers={"mkfs.erofs-lz4hc-64k": "`mkfs.erofs` {version}"},
    ),
    dict(
        what=f"build {LINUX}, zstd 3, 64 KiB clusters, sealed",
        file="zbuild-2026-11-26T220139Z.csv",
        tool="tool", value="wall_s", size="image_bytes",
        ours="sealfs-zstd-64k",
        peers={"mkfs.erofs-zstd-64k": "`mkfs.erofs` {version}"},
    ),
    dict(
        what=f"build {LINUX}, smallest: `--preset small` (zstd 12, 1 MiB), sealed",
        file="zbuild-2026-11-26T130718Z.csv",
        tool="tool", value="wall_s", size="image_bytes",
        ours="sealfs-small",
        peers={"mksquashfs-zstd15-1m": "`mksquashfs` {version} zstd 15, 1 MiB"},
    ),
    dict(
        what="image digest of `big`'s image (1.36 GB), warm",
        file="digest-2026-11-22T010332Z.csv",
        tool="tool", value="seconds",
        ours="sealfs digest",
        peers={"fsverity digest": "`fsverity digest` 1.5"},
        machine="Intel Xeon",
    ),
    dict(
        what=f"extract {LINUX}, every block verified, to tmpfs",
        file="extract-2026-11-28T123108Z.csv",
        tool="tool", value="seconds",
        ours="sealfs extract",
        peers={"unsquashfs": "`unsquashfs` 4.7.5", "fsck.erofs --extract": "`fsck.erofs` 1.9.4 `--extract`"},
        machine="AMD EPYC",
    ),
    dict(
        what="FUSE: read `big`, lz4hc 64 KiB, fresh mount, image in page cache",
        file="fusepeers-20261126-010719.csv",
        where={"table": "seq", "image": "lz4hc"},
        tool="tool", value="seconds",
        ours="sealfs mount (verified)",
        peers={
            "erofsfuse 1.9 (mkfs.erofs 1.9 image)": "`erofsfuse` 1.9",
            "erofsfuse 1.9, read_ahead_kb 1024 by hand": "`erofsfuse` 1.9, 1 MiB readahead",
            "squashfuse_ll 0.6": "`squashfuse_ll` 0.6",
            "squashfuse_ll 0.6, read_ahead_kb 1024 by hand": "`squashfuse_ll` 0.6, 1 MiB readahead",
        },
        machine="AMD EPYC",
    ),
    dict(
        what="FUSE: read `big`, uncompressed, fresh mount, image in page cache",
        file="fusepeers-20261126-010719.csv",
        where={"table": "seq", "image": "plain"},
        tool="tool", value="seconds",
        ours="sealfs mount (verified)",
        peers={
            "erofsfuse 1.9 (mkfs.erofs 1.9 image)": "`erofsfuse` 1.9",
            "erofsfuse 1.9, read_ahead_kb 1024 by hand": "`erofsfuse` 1.9, 1 MiB readahead",
            "squashfuse_ll 0.6": "`squashfuse_ll` 0.6",
            "squashfuse_ll 0.6, read_ahead_kb 1024 by hand": "`squashfuse_ll` 0.6, 1 MiB readahead",
        },
        machine="AMD EPYC",
    ),
    dict(
        what=f"FUSE: `ls -lR` of {LINUX}, fresh mount",
        file="fusepeers-20261126-005325.csv",
        where={"table": "ls"},
        tool="tool", value="seconds",
        ours="sealfs mount (verified)",
        peers={
            "erofsfuse 1.9 (mkfs.erofs 1.9 image)": "`erofsfuse` 1.9",
            "squashfuse_ll 0.6 (lz4hc image)": "`squashfuse_ll` 0.6",
        },
        machine="AMD EPYC",
    ),
    dict(
        what=f"FUSE against the kernel: `ls -lR` of {LINUX}, fresh mount",
        file="fusepeers-20261126-005325.csv",
        where={"table": "ls"},
        tool="tool", value="seconds",
        ours="sealfs mount (verified)",
        peers={"kernel EROFS (the sealfs image, file-backed)": "kernel EROFS mount of the image"},
        machine="AMD EPYC",
    ),
    dict(
        what=f"kernel mounts, cold `tar` of {LINUX}: the `--preset small` image",
        file="treeread-2026-11-26T1322Z.txt",
        tool="name", value="tar_s",
        ours="small",
        peers={"z15": "kernel SquashFS of `mksquashfs` zstd 15, 1 MiB"},
        machine="AMD EPYC",
    ),
    dict(
        what="remote (20 ms, 1 Gbit/s): read `big` (lz4hc) through a mount, cold",
        file="remote-20261128T050230Z.csv",
        where={"table": "seq"},
        tool="tool", value="seconds",
        ours="sealfs",
        peers={"rclone + kernel (unverified)": "`rclone mount` 1.60 + kernel EROFS, unverified"},
        machine="AMD EPYC",
    ),
    dict(
        what=f"remote: `ls -lR` of {LINUX} through a mount, cold",
        file="remote-20261128T050230Z.csv",
        where={"table": "ls"},
        tool="tool", value="seconds",
        ours="sealfs",
        peers={"rclone + kernel (unverified)": "`rclone mount` 1.60 + kernel EROFS, unverified"},
        machine="AMD EPYC",
    ),
    dict(
        what=f"remote: `cat` 2,000 random files of {LINUX} through a mount, cold",
        file="remote-20261128T050230Z.csv",
        where={"table": "cat"},
        tool="tool", value="seconds",
        ours="sealfs",
        peers={"rclone + kernel (unverified)": "`rclone mount` 1.60 + kernel EROFS, unverified"},
        machine="AMD EPYC",
    ),
    dict(
        what="remote: the same, lazy only (`mount --fill=off`)",
        file="remote-20261128T050230Z.csv",
        where={"table": "cat"},
        tool="tool", value="seconds",
        ours="sealfs --fill=off",
        peers={"rclone + kernel (unverified)": "`rclone mount` 1.60 + kernel EROFS, unverified"},
        machine="AMD EPYC",
    ),
]


def load(name):
    """The `# key: value` lines and the data rows (dicts) of a results file."""
    meta, lines = {}, []
    with open(os.path.join(RESULTS, name), newline="") as f:
        for line in f:
            if line.startswith("#"):
                key, sep, value = line[1:].strip().partition(": ")
                if sep:
                    meta[key] = value
            elif line.strip():
                lines.append(line)
    reader = csv.reader(lines)
    header = next(reader)
    rows = [dict(zip(header, r)) for r in reader if len(r) == len(header)]
    return meta, rows


def date_of(name):
    """YYYY-MM-DD, from the file's name (every results file is named after its start)."""
    m = re.search(r"(\d{4})-?(\d{2})-?(\d{2})", name)
    if not m:
        sys.exit(f"{name}: no date in the name")
    return "-".join(m.groups())


def machine_of(spec, meta):
    """The CPU and cores: from `# machine: nproc N, CPU, ...`, else the row's `machine`."""
    m = re.match(r"nproc (\d+), ([^,]+)", meta.get("machine", ""))
    if m:
        cpu = re.sub(r"\(R\)|\(TM\)| Processor", "", m.group(2)).strip()
        return f"{cpu} ×{m.group(1)}"
    if "machine" not in spec:
        sys.exit(f"{spec['file']}: the file names no machine and the row gives none")
    return f"{spec['machine']} ×2"


def version_of(meta, tool):
    """The version number a `# version TOOL:` line gives, if any."""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", meta.get(f"version {tool}", ""))
    return m.group(1) if m else ""


def medians(spec, rows):
    """{tool: (median seconds, runs, median size or None)} for the row's tools."""
    where = spec.get("where", {})
    out = {}
    for tool in [spec["ours"], *spec["peers"]]:
        sel = [r for r in rows if r[spec["tool"]] == tool and all(r[k] == v for k, v in where.items())]
        if not sel:
            sys.exit(f"{spec['file']}: no runs of {tool!r} where {where}")
        size = None
        if spec.get("size"):
            size = statistics.median(float(r[spec["size"]]) for r in sel)
        out[tool] = (statistics.median(float(r[spec["value"]]) for r in sel), len(sel), size)
    return out


def secs(s):
    return f"{s:.2f} s" if s < 100 else f"{s:.0f} s"


def row(spec):
    meta, rows = load(spec["file"])
    m = medians(spec, rows)
    ours, runs, our_size = m[spec["ours"]]
    best = min(spec["peers"], key=lambda t: m[t][0])
    peer, peer_runs, peer_size = m[best]
    label = spec["peers"][best].format(version=version_of(meta, best)).replace("  ", " ")
    size = f"{our_size / peer_size:.3f}×" if our_size and peer_size else ""
    measured = (
        f"{date_of(spec['file'])}, {machine_of(spec, meta)}, {min(runs, peer_runs)} runs"
        f" ([raw](bench/results/{spec['file']}))"
    )
    return (
        f"| {spec['what']} | {secs(ours)} | {label}: {secs(peer)} | **{peer / ours:.2f}×** | {size} "
        f"| {measured} |"
    )


def table():
    lines = [
        BEGIN,
        "",
        "| workload | sealfs | fastest current peer | sealfs speed | size | measured |",
        "|---|---:|---|---:|---:|---|",
    ]
    lines += [row(spec) for spec in ROWS]
    lines += [
        "",
        "Speed: the peer's median time over sealfs's (above 1: sealfs is faster). Size: sealfs's image over",
        "the peer's (sealed images carry their Merkle tree, about 1% of the size). sealfs checks every block",
        "it reads; the FUSE, kernel and rclone peers check none.",
        "",
        END,
    ]
    return "\n".join(lines) + "\n"


def readme_parts():
    text = open(README).read()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        sys.exit(f"README.md: the markers of the benchmark table are missing:\n  {BEGIN}\n  {END}")
    return text[:start], text[start : end + len(END) + 1], text[end + len(END) + 1 :]


def main():
    new = table()
    if sys.argv[1:] == ["--check"]:
        _, old, _ = readme_parts()
        if old != new:
            sys.stderr.write(
                "README.md: the benchmark table differs from what bench/readme_table.py makes of "
                "bench/results; run bench/readme_table.py --write and commit README.md\n"
            )
            sys.exit(1)
    elif sys.argv[1:] == ["--write"]:
        before, _, after = readme_parts()
        with open(README, "w") as f:
            f.write(before + new + after)
    elif not sys.argv[1:]:
        sys.stdout.write(new)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
