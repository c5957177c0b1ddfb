#!/usr/bin/env python3
"""Regression check between two sealfs binaries: the same workloads, interleaved, on this machine.

    OLD=path/to/old/sealfs NEW=target/release/sealfs bench/regress.py
        (RUNS=5, CORPUS_DIR=bench/.corpus, DEST_DIR=a tmpfs for extraction (default: a new one))

Workloads (page cache warm; every image is built once, by NEW, and read by both):
    digest        sealfs digest IMG                          `big`, sealed, uncompressed (1.4 GB)
    verify        sealfs verify --digest D IMG               the same image
    extract       sealfs extract -q --digest D IMG DEST      `linux`, sealed, into tmpfs
    fuse-seq      sealfs mount IMG MNT; cat MNT/linux.tar    `big`, lz4hc 64 KiB clusters, fresh
                                                             mount each run (nothing in the FUSE
                                                             page cache), verified
    build-plain   sealfs build -q -T 0 SRC IMG               `linux`, sealed, uncompressed: each
                                                             binary builds its own image (its size
                                                             is recorded too)
    build-zstd    sealfs build -q -T 0 -z zstd -C 65536 ...  the same, zstd 64 KiB clusters
    verify-own    sealfs verify --digest D IMG               `linux`, sealed: each binary its own
                                                             image (per-file digests checked too)
    digest-files  sealfs digest --files --digest D IMG       the same images
The default set is the first four; WORKLOADS="build-plain build-zstd verify-own digest-files" gives
the comparison of a format change (issue 28: per-file digests moved into the image).
After one untimed round, RUNS rounds; in each round the order of OLD and NEW alternates (A B, B A, ...).
Prints a Markdown table (median, min, max, NEW/OLD ratio), writes bench/results/regress-<stamp>.csv
and the chart docs/bench-regress.png (`bench/regress.py --plot CSV` redraws it from a CSV).
"""
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RUNS = int(os.environ.get("RUNS", "5"))
OLD = os.environ.get("OLD", "")
NEW = os.environ.get("NEW", os.path.join(REPO, "target/release/sealfs"))
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))
WORKLOADS = os.environ.get("WORKLOADS", "digest verify extract fuse-seq").split()


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def timed(cmd, **kw):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t


def version(binary):
    return sh([binary, "--version"]).strip()


def plot(csv_path, out_png):
    """Median time of OLD and NEW per workload, min-max whiskers, from a CSV this script wrote."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(csv.DictReader(open(csv_path)))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.38
    for k, (binary, color) in enumerate([("old", "#7f7f7f"), ("new", "#2b7bba")]):
        med, lo, hi = [], [], []
        for w in workloads:
            t = [float(r["seconds"]) for r in rows if r["workload"] == w and r["binary"] == binary]
            m = statistics.median(t)
            med.append(m)
            lo.append(m - min(t))
            hi.append(max(t) - m)
        xs = [i + (k - 0.5) * width for i in range(len(workloads))]
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3, color=color,
               label="previous release" if binary == "old" else "this change")
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel("seconds (median, min-max)")
    ax.set_title(f"sealfs old vs new, interleaved ({os.path.basename(csv_path)})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--plot":
        plot(sys.argv[2], os.path.join(REPO, "docs", "bench-regress.png"))
        return
    work = tempfile.mkdtemp(prefix="sealfs-regress-", dir=os.environ.get("WORK_DIR", "/var/tmp"))
    big = os.path.join(CORPUS, "big", "linux.tar")
    linux = os.path.join(CORPUS, "linux", "linux-source-6.1")
    for p in (big, linux):
        if not os.path.exists(p):
            sys.exit(f"corpus {p} missing: run bench/corpus.sh linux big")
    bigdir = os.path.join(work, "bigsrc")
    os.makedirs(bigdir)
    os.link(big, os.path.join(bigdir, "linux.tar"))
    images = {}
    if {"digest", "verify"} & set(WORKLOADS):
        img = os.path.join(work, "big.img")
        images["big"] = (img, sh([NEW, "build", "-q", "-T", "0", bigdir, img]).strip())
    if "fuse-seq" in WORKLOADS:
        img = os.path.join(work, "bigz.img")
        images["bigz"] = (
            img,
            sh([NEW, "build", "-q", "-T", "0", "-z", "lz4hc", "-C", "65536", bigdir, img]).strip(),
        )
    if "extract" in WORKLOADS:
        img = os.path.join(work, "linux.img")
        images["linux"] = (img, sh([NEW, "build", "-q", "-T", "0", linux, img]).strip())
    dest_root = os.environ.get("DEST_DIR")
    own_tmpfs = None
    if dest_root is None and "extract" in WORKLOADS:
        own_tmpfs = os.path.join(work, "tmpfs")
        os.makedirs(own_tmpfs)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g", "tmpfs", own_tmpfs], check=True)
        dest_root = own_tmpfs
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)

    own = {}
    if {"verify-own", "digest-files"} & set(WORKLOADS):
        for name, binary in (("old", OLD), ("new", NEW)):
            img = os.path.join(work, f"linux-{name}.img")
            own[binary] = (img, sh([binary, "build", "-q", "-T", "0", linux, img]).strip())
    sizes = {}

    def build(binary, extra):
        img = os.path.join(work, "built.img")
        t = timed([binary, "build", "-q", "-T", "0", *extra, linux, img])
        sizes[binary] = os.path.getsize(img)
        os.remove(img)
        return t

    def run(workload, binary):
        if workload == "build-plain":
            return build(binary, [])
        if workload == "build-zstd":
            return build(binary, ["-z", "zstd", "-C", "65536"])
        if workload == "verify-own":
            img, d = own[binary]
            return timed([binary, "verify", "--digest", d, img])
        if workload == "digest-files":
            img, d = own[binary]
            # The previous release's `digest --files` takes no --digest.
            args = [] if binary == OLD else ["--digest", d]
            return timed([binary, "digest", "--files", *args, img])
        if workload == "digest":
            img, _ = images["big"]
            return timed([binary, "digest", img])
        if workload == "verify":
            img, d = images["big"]
            return timed([binary, "verify", "--digest", d, img])
        if workload == "extract":
            img, d = images["linux"]
            dest = os.path.join(dest_root, "x")
            t = timed([binary, "extract", "-q", "--digest", d, img, dest])
            subprocess.run(["rm", "-rf", dest], check=True)
            return t
        if workload == "fuse-seq":
            img, d = images["bigz"]
            subprocess.run([binary, "mount", "--digest", d, img, mnt], check=True)
            try:
                return timed(["cat", os.path.join(mnt, "linux.tar")])
            finally:
                subprocess.run([binary, "umount", mnt], check=True)
        raise ValueError(workload)

    # Warm-up: one untimed round (page cache of the images and corpus).
    for w in WORKLOADS:
        run(w, NEW)
        run(w, OLD)
    rows = []
    for r in range(RUNS):
        for w in WORKLOADS:
            order = [("old", OLD), ("new", NEW)] if r % 2 == 0 else [("new", NEW), ("old", OLD)]
            for name, binary in order:
                t = run(w, binary)
                rows.append((w, name, r, t, sizes.pop(binary, "")))
    if own_tmpfs:
        subprocess.run(["umount", own_tmpfs], check=True)
    subprocess.run(["rm", "-rf", work], check=True)

    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    out = os.path.join(HERE, "results", f"regress-{stamp}.csv")
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "binary", "round", "seconds", "image_bytes"])
        w.writerows(rows)
    cpu = sh(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]).strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, {cpu}, "
          f"kernel {os.uname().release}; OLD {version(OLD)} ({OLD}), NEW {version(NEW)} ({NEW}); "
          f"median of {RUNS} interleaved runs after a warm-up, page cache warm")
    print()
    print("| workload | old median (min-max) s | new median (min-max) s | new/old time |")
    print("|---|---|---|---|")
    for wl in WORKLOADS:
        t = {b: [s for (w, n, _, s, _) in rows if w == wl and n == b] for b in ("old", "new")}
        size = {b: [z for (w, n, _, _, z) in rows if w == wl and n == b and z != ""] for b in ("old", "new")}
        med = {b: statistics.median(v) for b, v in t.items()}
        cell = lambda b: f"{med[b]:.3f} ({min(t[b]):.3f}-{max(t[b]):.3f})"
        sz = ""
        if size["old"] and size["new"]:
            sz = f" (image {size['new'][0]} vs {size['old'][0]} bytes: {size['new'][0] / size['old'][0]:.4f})"
        print(f"| {wl} | {cell('old')} | {cell('new')} | {med['new'] / med['old']:.3f}{sz} |")
    print()
    print(f"raw: {os.path.relpath(out, REPO)}")
    plot(out, os.path.join(REPO, "docs", "bench-regress.png"))


if __name__ == "__main__":
    main()
