#!/usr/bin/env python3
"""How much of a new version an update fetches, per layout (issue 41, "measure first"), as
`sealfs diff` reports it.

    bench/delta_layouts.py    (after `cargo build --release -p sealfs-cli` and `bench/corpus.sh linux`;
                               SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus,
                               WORK=/var/tmp/sealfs-delta-layouts)

V1=DIR V2=DIR compare two versions of a tree as they are instead. Default: v1: `fs/` of
linux-source-6.1 (2,078 files, 46 MB). v2: 20 of its `.c` files (picked with a fixed
seed) with 20 bytes inserted in the middle, and one new file of 3,500 bytes. Each layout builds
both and `sealfs diff --json v1.img v2.img` says how many of v2's blocks v1 holds and what the
update fetches, and `--regions` where those blocks are (data of kept files, of changed files,
directories, the packed inode, the metabox, other metadata). Prints Markdown tables: the fetch, the
fetched blocks by region, and the images' sizes. LAYOUTS (a Python list of (label, [args]))
replaces the builds compared.
"""
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEALFS = os.environ.get("SEALFS", str(HERE.parent / "target/release/sealfs"))
CORPUS = Path(os.environ.get("CORPUS_DIR", HERE / ".corpus"))
WORK = Path(os.environ.get("WORK", "/var/tmp/sealfs-delta-layouts"))
LZ4HC = ["-z", "lz4hc", "-C", "65536"]
# "LIKE" in a build's arguments: v2 is built `--like` v1's image.
LAYOUTS = [("default (uncompressed)", []), ("default, v2 `--like` v1", ["LIKE"]),
           ("`--layout data-first`", ["--layout", "data-first"]),
           ("`--layout data-first`, v2 `--like` v1", ["--layout", "data-first", "LIKE"]),
           ("`-z lz4hc -C 65536`", LZ4HC), ("`-z lz4hc -C 65536`, v2 `--like` v1", LZ4HC + ["LIKE"]),
           ("`--preset small`", ["--preset", "small"]),
           ("`--preset small`, v2 `--like` v1", ["--preset", "small", "LIKE"]),
           ("`--preset small --layout packed-pieces`", ["--preset", "small", "--layout", "packed-pieces"])]
if os.environ.get("LAYOUTS"):
    LAYOUTS = eval(os.environ["LAYOUTS"])  # noqa: S307 (a benchmark's own knob)
REGIONS = ["kept_files", "changed_files", "directories", "packed", "metabox", "metadata"]


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    if os.environ.get("V1") and os.environ.get("V2"):
        # Two versions of a real tree (e.g. bench/delta.py's), as they are.
        run_layouts(Path(os.environ["V1"]), Path(os.environ["V2"]))
        return
    src = next((CORPUS / "linux").glob("linux-source-*")) / "fs"
    v1, v2 = WORK / "v1", WORK / "v2"
    shutil.copytree(src, v1, symlinks=True)
    shutil.copytree(src, v2, symlinks=True)
    r = random.Random(41)
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(v2) for f in fs if f.endswith(".c"))
    changed = 0
    for p in r.sample(files, 20):
        b = open(p, "rb").read()
        m = len(b) // 2
        open(p, "wb").write(b[:m] + b"/* 20 bytes added */" + b[m:])
        changed += len(b) + 20
    (v2 / "new-file.c").write_bytes(b"/* new */\n" * 350)
    changed += 3500
    print(f"changed and new files: {changed:,} bytes\n")
    run_layouts(v1, v2)


def run_layouts(v1, v2):
    rows, regions, sizes = [], [], []
    print("| build | v2 blocks | found in v1 | to fetch | fetched bytes (blocks, tree, seal) | of the image |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, args in LAYOUTS:
        imgs = []
        for v in (v1, v2):
            img = WORK / f"v{len(imgs) + 1}-{LAYOUTS.index((label, args))}.img"
            a = [x for y in args for x in (["--like", str(imgs[0])] if imgs else []) if y == "LIKE"]
            a = [y for y in args if y != "LIKE"] + a
            subprocess.run([SEALFS, "build", *a, str(v), str(img)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            imgs.append(img)
        d = json.loads(subprocess.run([SEALFS, "diff", "--json", "--regions", str(imgs[0]), str(imgs[1])], check=True,
                                      capture_output=True).stdout)
        print(f"| {label} | {d['data_blocks']:,} | {d['reused_blocks']:,} "
              f"({100 * d['reused_blocks'] / d['data_blocks']:.1f}%) | {d['fetch_blocks']:,} in {d['requests']} requests "
              f"| {d['fetch_bytes']:,} | {100 * d['fetch_bytes'] / d['image_length']:.1f}% |")
        regions.append((label, d["regions"]))
        sizes.append((label, imgs[0].stat().st_size, imgs[1].stat().st_size))
    print("\nBlocks to fetch by region (of the region's blocks in v2):\n")
    print("| build | " + " | ".join(REGIONS) + " |")
    print("|---|" + "---:|" * len(REGIONS))
    for label, r in regions:
        print(f"| {label} | " + " | ".join(f"{r[k]['fetch_blocks']:,} of {r[k]['blocks']:,}" for k in REGIONS) + " |")
    print("\n| build | v1 image bytes | v2 image bytes |\n|---|---:|---:|")
    for label, a, b in sizes:
        print(f"| {label} | {a:,} | {b:,} |")


if __name__ == "__main__":
    main()
