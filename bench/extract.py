#!/usr/bin/env python3
"""Extract benchmark: the `linux` corpus image extracted to disk, warm page cache.

    bench/extract.py            (RUNS=5, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus)

The peers are the newest built by scripts/build-oracles.sh where present (erofs-utils 1.9 and
squashfs-tools 4.7 under target/oracles), else those on PATH; EROFS_BIN=DIR or SQUASHFS_BIN=DIR
name others. The table says which versions ran.

Images of the same tree, uncompressed: a sealed sealfs image, a mkfs.erofs image, a mksquashfs image.
Interleaves, after one untimed warm-up round, RUNS timed rounds of:
    sealfs extract IMG DEST                  every block verified against the seal (default)
    sealfs extract --verify=none IMG DEST    no verification (to show its share of the time)
    fsck.erofs --extract=DEST MKFS_IMG
    unsquashfs -d DEST SQUASHFS_IMG
DEST is on the same disk as the images and removed (untimed) after every run.
Writes bench/results/extract-<stamp>.csv, a section of docs/benchmarks.md and docs/bench-extract.png.
"""
import csv
import resource
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RUNS = int(os.environ.get("RUNS", "5"))
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))


def newest(env, built, name):
    """`name` from $env, else from the oracle build at `built`, else from PATH."""
    for d in (os.environ.get(env), os.path.join(REPO, "target/oracles", built, "bin")):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return name


MKFS_EROFS = newest("EROFS_BIN", "erofs-utils-1.9", "mkfs.erofs")
FSCK_EROFS = newest("EROFS_BIN", "erofs-utils-1.9", "fsck.erofs")
MKSQUASHFS = newest("SQUASHFS_BIN", "squashfs-tools-4.7", "mksquashfs")
UNSQUASHFS = newest("SQUASHFS_BIN", "squashfs-tools-4.7", "unsquashfs")
HEADING = "## Extract: linux corpus, warm cache"


def sh(cmd):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout


def main():
    src = os.path.join(CORPUS, "linux", "linux-source-6.1")
    if not os.path.isdir(src):
        subprocess.run(["bash", os.path.join(HERE, "corpus.sh"), "linux"], check=True)
    work = tempfile.mkdtemp(prefix="sealfs-extract-", dir=CORPUS)
    img, mk, sq = (os.path.join(work, n) for n in ("sealfs.img", "mkfs.img", "squash.img"))
    digest = sh([SEALFS, "build", "-q", "-T", "0", src, img]).strip()
    sh([MKFS_EROFS, "-T0", "--quiet", mk, src])
    sh([MKSQUASHFS, src, sq, "-noappend", "-noI", "-noId", "-noD", "-noF", "-noX", "-quiet", "-no-progress"])
    for f in (img, mk, sq):
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)
    # The destination is a tmpfs, so the figures are the tools' work, not the disk's writeback (on the
    # ext4 disk every tool took 13-22 s, bound by writeback); DEST_DIR overrides it.
    dest_root = os.environ.get("DEST_DIR")
    mounted = None
    if not dest_root:
        mounted = tempfile.mkdtemp(prefix="sealfs-extract-dest-")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4g", "tmpfs", mounted], check=True)
        dest_root = mounted
    dest = os.path.join(dest_root, "dest")
    tools = {
        "sealfs extract": lambda d: [SEALFS, "extract", "-q", "--digest", digest, img, d],
        "sealfs extract --verify=none": lambda d: [SEALFS, "extract", "-q", "--verify=none", img, d],
        "fsck.erofs --extract": lambda d: [FSCK_EROFS, f"--extract={d}", mk],
        "unsquashfs": lambda d: [UNSQUASHFS, "-q", "-n", "-d", d, sq],
    }
    rows = []
    for rnd in range(RUNS + 1):
        for name, cmd in tools.items():
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run(["sync"])
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run(cmd(dest), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            el = time.perf_counter() - t
            ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (ru2.ru_utime - ru.ru_utime) + (ru2.ru_stime - ru.ru_stime)
            if rnd > 0:
                rows.append((rnd, name, el, cpu))
            if rnd == 0 and name == "sealfs extract":
                r = subprocess.run(["diff", "-r", "--no-dereference", src, dest], stdout=subprocess.PIPE, text=True)
                assert r.returncode == 0, f"extracted tree differs from the source:\n{r.stdout[:2000]}"
        print(f"[extract] round {rnd}/{RUNS}", file=sys.stderr)
    shutil.rmtree(dest, ignore_errors=True)
    if mounted:
        subprocess.run(["umount", mounted])
        os.rmdir(mounted)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    csv_path = os.path.join(HERE, "results", f"extract-{stamp}.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "tool", "seconds", "cpu_seconds"])
        w.writerows(rows)
    st = {n: (statistics.median([t for _, m, t, _ in rows if m == n]), min(t for _, m, t, _ in rows if m == n), max(t for _, m, t, _ in rows if m == n)) for n in tools}
    cpu_med = {n: statistics.median([c for _, m, _, c in rows if m == n]) for n in tools}
    load = os.getloadavg()
    cpu = sh(["grep", "-m1", "model name", "/proc/cpuinfo"]).split(":", 1)[1].strip()
    def version(tool, flag):  # unsquashfs -version exits 1
        out = subprocess.run([tool, flag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
        return f"{out.splitlines()[0].strip()} ({tool})"

    ver = {"erofs-utils": version(FSCK_EROFS, "-V"), "squashfs-tools": version(UNSQUASHFS, "-version")}
    ours = st["sealfs extract"][0]
    r_fsck = st["fsck.erofs --extract"][0] / ours
    r_sq = st["unsquashfs"][0] / ours
    share = max(0.0, (ours - st["sealfs extract --verify=none"][0]) / ours)
    out = [HEADING, "",
           f"Measured {time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())} with `bench/extract.py`; raw runs in `bench/results/{os.path.basename(csv_path)}`.", "",
           f"- Machine: nproc {os.cpu_count()}, {cpu}, kernel {os.uname().release}; images on ext4, destination {'a tmpfs' if mounted else dest_root} (so the disk's writeback is not what is measured)",
           "- Images of the same tree, uncompressed: sealed `sealfs build -T 0`, `mkfs.erofs -T0`, `mksquashfs -noI -noId -noD -noF -noX`",
           f"- Method: images read once (warm), one untimed round, then {RUNS} rounds, tools interleaved; destination removed (untimed) before each run; the first sealfs extraction was checked equal to the source with `diff -r`.",
           f"- Versions: {sh([SEALFS, '--version']).strip()}, erofs-utils {ver['erofs-utils']}, squashfs-tools {ver['squashfs-tools']}",
           f"- Load average (1, 5, 15 min) at the end: {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}; CPU is user + system time of the command (all its threads)", "",
           "| command | median (s) | min (s) | max (s) | CPU, median (s) |", "|---|---:|---:|---:|---:|"]
    for n in tools:
        out.append(f"| `{n}` | {st[n][0]:.2f} | {st[n][1]:.2f} | {st[n][2]:.2f} | {cpu_med[n]:.2f} |")
    out += ["", "| target | figure | met? |", "|---|---:|---|",
            f"| `sealfs extract` (verified, authenticated by `--digest`) ≥ 1.5× faster than `fsck.erofs --extract` | {r_fsck:.2f}× | {'met' if r_fsck >= 1.5 else '**not met**'} |",
            f"| `sealfs extract` ≥ 1.5× faster than `unsquashfs` | {r_sq:.2f}× | {'met' if r_sq >= 1.5 else '**not met**'} |",
            f"| verification share of the extraction time | {share:.0%} | – |",
            "", "![Extract benchmark](bench-extract.png)", ""]
    text = "\n".join(out)
    doc_path = os.path.join(REPO, "docs", "benchmarks.md")
    doc = open(doc_path).read() if os.path.exists(doc_path) else "# Benchmarks\n\n"
    pat = re.compile(r"^" + re.escape(HEADING) + r"[ \t]*\n.*?(?=^## |\Z)", re.M | re.S)
    doc = pat.sub(lambda _: text + "\n", doc, count=1) if pat.search(doc) else doc.rstrip("\n") + "\n\n" + text + "\n"
    open(doc_path, "w").write(doc)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = list(tools)
        fig, ax = plt.subplots(figsize=(9, 4))
        med = [st[n][0] for n in names]
        err = [[st[n][0] - st[n][1] for n in names], [st[n][2] - st[n][0] for n in names]]
        ax.bar(range(len(names)), med, yerr=err, capsize=5, color=["#2b7bba", "#6baed6", "#e08214", "#7f7f7f"])
        ax.set_xticks(range(len(names)), [n.replace(" --", "\n--") for n in names], fontsize=8)
        ax.set_ylabel("seconds (median, min/max)")
        ax.set_title(f"Extract linux corpus, warm ({RUNS} runs)")
        fig.tight_layout()
        fig.savefig(os.path.join(REPO, "docs", "bench-extract.png"), dpi=100)
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    print(text)


if __name__ == "__main__":
    main()
