#!/usr/bin/env python3
"""Where a verified FUSE read's time goes (issue 42, item 1: measure first).

    bench/fuse_profile.py            (as root; needs perf; RUNS=3, SEALFS=target/release/sealfs,
                                      BIG=bench/.corpus/big/linux.tar from bench/corpus.sh big,
                                      BEFORE=another sealfs binary to compare, run by turns)

Builds two images of one big file (uncompressed; lz4hc in 64 KiB clusters), and for each, RUNS
times: a fresh `sealfs mount` (its defaults: 1 MiB readahead, verified), image in the page cache,
`cat big > /dev/null` timed while `perf record -g` samples the daemon's threads (cpu-clock,
2 kHz). Each sample goes to the first of these its call chain shows, leaf first: SHA-256
(sealfs_verity), decompression (LZ4), the reply (`writev` to /dev/fuse: the kernel copying the
reply's pages), reading the image (`pread`: the page cache copied to the daemon), waiting for and
reading requests (`read` from /dev/fuse), copies in the daemon's own code (memcpy/memmove in
user space: the kernel's memcpy inside `writev` or `pread` counts as the reply or the read), the
rest. Prints the daemon's CPU time per category, per 1 MiB of file read (the kernel asks 1 MiB per
request at this readahead), medians of RUNS, and the wall time, for docs/benchmarks.md; and, from
`sealfs stats` (binaries that have them), the daemon's own counters of where its read requests'
time went (`data_path`), per request. With BEFORE, each run mounts with both binaries in turn.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
BEFORE = os.environ.get("BEFORE")
BIG = os.environ.get("BIG", os.path.join(HERE, ".corpus/big/linux.tar"))
RUNS = int(os.environ.get("RUNS", "3"))
FREQ = 2000
CATEGORIES = [
    ("sha256", ("sealfs_verity", "sha256")),
    ("decompress", ("LZ4_", "lz4", "ZSTD", "zstd")),
    ("reply writev", ("fuse_dev_write", "__GI___writev", "writev")),
    ("image pread", ("pread", "filemap_read")),
    ("request read", ("fuse_dev_read", "fuse_dev_do_read", "__GI___read", "__libc_read")),
    ("daemon memcpy", ("memmove", "memcpy")),
]


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def categorize(perf_data):
    """CPU seconds of the daemon per category, from `perf script` call chains."""
    out = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "comm,tid,ip,sym"],
        capture_output=True, text=True, check=True,
    ).stdout
    counts = {name: 0 for name, _ in CATEGORIES}
    counts["other"] = 0
    for sample in out.split("\n\n"):
        frames = [l.strip() for l in sample.strip().splitlines()[1:]]
        if not sample.strip():
            continue
        found = "other"
        for frame in frames:
            hit = next((n for n, keys in CATEGORIES if any(k in frame for k in keys)), None)
            if hit == "daemon memcpy" and frame.startswith("ffff"):
                # The kernel's memcpy: its caller (the reply's writev, the image's pread) decides.
                continue
            if hit:
                found = hit
                break
        counts[found] += 1
    return {k: v / FREQ for k, v in counts.items()}


def main():
    if os.geteuid() != 0:
        sys.exit("needs root (mount, perf of another process)")
    if not os.path.exists(BIG):
        sys.exit(f"{BIG} missing: bench/corpus.sh big")
    size = os.path.getsize(BIG)
    work = tempfile.mkdtemp(prefix="fuse-profile-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    src, mnt = os.path.join(work, "src"), os.path.join(work, "mnt")
    os.makedirs(src)
    os.makedirs(mnt)
    os.link(BIG, os.path.join(src, "big")) if os.stat(BIG).st_dev == os.stat(work).st_dev else sh(
        "cp", BIG, os.path.join(src, "big"))
    images = {
        "uncompressed": [],
        "lz4hc, 64 KiB clusters": ["-z", "lz4hc", "-C", "65536"],
    }
    binaries = [("after", SEALFS)] + ([("before", BEFORE)] if BEFORE else [])
    results = {}
    counters = {}
    for name, flags in images.items():
        img = os.path.join(work, name.split(",")[0] + ".img")
        sh(SEALFS, "build", *flags, src, img, stdout=subprocess.DEVNULL)
        sh("cat", img, stdout=subprocess.DEVNULL)
        for r in range(RUNS):
            for label, binary in (binaries if r % 2 == 0 else binaries[::-1]):
                sh(binary, "mount", img, mnt)
                pid = subprocess.run(["pgrep", "-f", f"sealfs mount {img}"], capture_output=True,
                                     text=True).stdout.split()[0]
                data = os.path.join(work, f"perf-{r}.data")
                rec = subprocess.Popen(["perf", "record", "-q", "-F", str(FREQ), "-g", "-p", pid,
                                        "-o", data], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
                time.sleep(0.5)
                t = time.monotonic()
                sh("cat", os.path.join(mnt, "big"), stdout=subprocess.DEVNULL)
                wall = time.monotonic() - t
                rec.send_signal(2)
                rec.wait()
                stats = json.loads(subprocess.run([binary, "stats", "--json", mnt],
                                                  capture_output=True, text=True).stdout or "{}")
                sh(binary, "umount", mnt)
                cpu = categorize(data)
                results.setdefault((name, label), []).append((wall, cpu))
                if "data_path" in stats:
                    counters.setdefault((name, label), []).append(stats["data_path"])
                os.unlink(data)
    mib = size / (1 << 20)
    print(f"`cat` of {size:,} bytes ({mib:.0f} requests of 1 MiB), {RUNS} runs, medians; "
          f"daemon CPU in µs per 1 MiB request; load average {open('/proc/loadavg').read().split()[0]}")
    print()
    cats = [n for n, _ in CATEGORIES] + ["other"]
    print("| image | binary | wall s | daemon CPU s | " + " | ".join(cats) + " |")
    print("|---|---|---|---|" + "---|" * len(cats))
    for (name, label), runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        total = statistics.median(sum(c.values()) for _, c in runs)
        per = [statistics.median(c[k] for _, c in runs) / mib * 1e6 for k in cats]
        print(f"| {name} | {label} | {wall:.3f} | {total:.2f} | " +
              " | ".join(f"{p:.0f}" for p in per) + " |")
    if counters:
        keys = ["read_seconds", "fetch_seconds", "hash_seconds", "decompress_seconds",
                "reply_seconds"]
        print()
        print("`sealfs stats` data_path counters, µs per request (medians):")
        print()
        print("| image | binary | requests | " + " | ".join(k.replace("_seconds", "") for k in keys)
              + " |")
        print("|---|---|---|" + "---|" * len(keys))
        for (name, label), runs in counters.items():
            reqs = statistics.median(c["requests"] for c in runs)
            per = [statistics.median(c.get(k, 0) / c["requests"] for c in runs) * 1e6
                   for k in keys]
            print(f"| {name} | {label} | {reqs:.0f} | " + " | ".join(f"{p:.0f}" for p in per)
                  + " |")
    sh("rm", "-rf", work)


if __name__ == "__main__":
    main()
