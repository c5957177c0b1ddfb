#!/usr/bin/env python3
"""Sequential FUSE reads against the current peers: `sealfs mount` against erofsfuse 1.9 and
squashfuse_ll 0.6 (issue 17).

    bench/fusepeers.py     (RUNS=5, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus,
                            MKFS_EROFS, EROFSFUSE, SQUASHFUSE_LL: the peers, by default the ones
                            scripts/build-oracles.sh builds into target/oracles/; squashfuse 0.6
                            needs `SQUASHFUSE_SRC=... scripts/build-oracles.sh squashfuse`)

`cat big > /dev/null` (linux.tar, 1.36 GB) on a fresh mount with the image in the page cache
(warm-image: what the FUSE file system itself costs), every tool in turn, RUNS rounds after an
untimed warm-up round: medians with min and max, of the wall time and of the daemon's CPU time
(user + system, from /proc/PID/stat). Each peer reads the image its own builder made with the same
settings (lz4hc, 64 KiB clusters or blocks; and uncompressed); erofsfuse also reads sealfs's
image (the same bytes the sealfs rows read). Writes bench/results/fusepeers-<stamp>.csv and a
section of docs/benchmarks.md.
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
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))
ORACLES = os.path.join(REPO, "target/oracles")
MKFS = os.environ.get("MKFS_EROFS", os.path.join(ORACLES, "erofs-utils-1.9/bin/mkfs.erofs"))
EROFSFUSE = os.environ.get("EROFSFUSE", os.path.join(ORACLES, "erofs-utils-1.9/bin/erofsfuse"))
SQUASHFUSE = os.environ.get("SQUASHFUSE_LL", os.path.join(ORACLES, "squashfuse-0.6/bin/squashfuse_ll"))
HEADING = "## FUSE sequential reads against erofsfuse 1.9 and squashfuse_ll 0.6 (issue 17)"
TICK = os.sysconf("SC_CLK_TCK")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw).stdout


def version(cmd, want=""):
    """The first line of `cmd`'s output that contains `want`."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    lines = [line for line in out.strip().splitlines() if want in line]
    return lines[0] if lines else "?"


class Mount:
    def __init__(self, name, argv, image):
        self.name, self.argv, self.image = name, argv, image
        self.mp = tempfile.mkdtemp(prefix="sealfs-peers-")

    def mount(self):
        subprocess.run(["cat", self.image], stdout=subprocess.DEVNULL, check=True)
        sh([*self.argv, self.image, self.mp])
        deadline = time.time() + 10
        while not os.path.ismount(self.mp):
            if time.time() > deadline:
                raise RuntimeError(f"{self.name}: not mounted")
            time.sleep(0.02)

    def umount(self):
        subprocess.run(["umount", self.mp], check=True)
        time.sleep(0.2)

    def cpu(self):
        """User + system seconds of the daemon serving the mount."""
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                if self.mp.encode() not in cmd:
                    continue
                f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / TICK
            except OSError:
                continue
        raise RuntimeError(f"{self.name}: no daemon")


def images(work):
    src = os.path.join(CORPUS, "big")
    if not os.path.exists(os.path.join(src, "linux.tar")):
        subprocess.run(["bash", os.path.join(HERE, "corpus.sh"), "big"], check=True)
    tree = os.path.join(work, "src")
    if not os.path.exists(tree):
        os.makedirs(tree)
        os.link(os.path.join(src, "linux.tar"), os.path.join(tree, "big"))
    made = {}

    def img(name, cmd):
        path = os.path.join(work, name)
        if not os.path.exists(path):
            print(f"[images] {name}", file=sys.stderr)
            sh(cmd(path))
        made[name] = path

    img("sealfs-lz4hc", lambda p: [SEALFS, "build", "-q", "-z", "lz4hc", "-C", "65536", tree, p])
    img("mkfs-lz4hc", lambda p: [MKFS, "-zlz4hc", "-C65536", p, tree])
    img("sqfs-lz4hc", lambda p: ["mksquashfs", tree, p, "-noappend", "-quiet", "-no-progress", "-comp", "lz4", "-Xhc", "-b", "65536"])
    img("sealfs-plain", lambda p: [SEALFS, "build", "-q", tree, p])
    img("mkfs-plain", lambda p: [MKFS, p, tree])
    img("sqfs-plain", lambda p: ["mksquashfs", tree, p, "-noappend", "-quiet", "-no-progress", "-noI", "-noId", "-noD", "-noF", "-noX"])
    return made


def main():
    work = os.path.join(CORPUS, "fusepeers")
    os.makedirs(work, exist_ok=True)
    imgs = images(work)
    rows = []
    for kind in ("lz4hc", "plain"):
        s = imgs[f"sealfs-{kind}"]
        digest = sh([SEALFS, "digest", s]).strip()
        mounts = [
            Mount("sealfs mount (verified)", [SEALFS, "mount", "--digest", digest], s),
            Mount("sealfs mount --verify=none", [SEALFS, "mount", "--verify=none"], s),
            Mount("erofsfuse 1.9 (mkfs.erofs 1.9 image)", [EROFSFUSE], imgs[f"mkfs-{kind}"]),
            Mount("erofsfuse 1.9 (the sealfs image)", [EROFSFUSE], s),
            Mount("squashfuse_ll 0.6", [SQUASHFUSE], imgs[f"sqfs-{kind}"]),
        ]
        for rnd in range(RUNS + 1):
            for m in mounts:
                m.mount()
                c0, t0 = m.cpu(), time.perf_counter()
                subprocess.run(["cat", os.path.join(m.mp, "big")], stdout=subprocess.DEVNULL, check=True)
                t1, c1 = time.perf_counter(), m.cpu()
                m.umount()
                if rnd > 0:
                    rows.append((kind, rnd, m.name, t1 - t0, c1 - c0))
            print(f"[{kind}] round {rnd}/{RUNS}", file=sys.stderr)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(HERE, "results", f"fusepeers-{stamp}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["image", "round", "tool", "seconds", "daemon_cpu_seconds"])
        w.writerows(rows)
    report(rows, imgs)


def report(rows, imgs):
    def stats(kind, tool, col):
        v = [r[col] for r in rows if r[0] == kind and r[2] == tool]
        return statistics.median(v), min(v), max(v)

    load = open("/proc/loadavg").read().split()[:3]
    lines = [
        HEADING,
        "",
        f"`cat big > /dev/null` (linux.tar, 1,361,950,720 bytes) on a fresh mount, image in the page cache; "
        f"tools interleaved, median of {RUNS} rounds after a warm-up (min–max). Ratio: the peer's median time "
        "over this row's (above 1: faster than the peer). Load average at the end: " + " ".join(load) + ".",
        f"Versions: {version([SEALFS, '--version'])}; {version([MKFS, '--version'])}; "
        f"erofsfuse of the same build ({EROFSFUSE}); {version([SQUASHFUSE, '--version'])}; "
        f"{version(['mksquashfs', '-version'])}.",
        "",
    ]
    for kind, what in (("lz4hc", "lz4hc, 64 KiB clusters (squashfs: lz4 -Xhc, 64 KiB blocks)"), ("plain", "uncompressed")):
        sizes = {k: os.path.getsize(imgs[f"{k}-{kind}"]) for k in ("sealfs", "mkfs", "sqfs")}
        lines += [
            f"### {what}",
            "",
            f"Images: sealfs {sizes['sealfs']:,} bytes (sealed), mkfs.erofs {sizes['mkfs']:,}, mksquashfs {sizes['sqfs']:,}.",
            "",
            "| tool | seconds | MB/s | daemon CPU s | vs erofsfuse 1.9 | vs squashfuse_ll 0.6 |",
            "|---|---|---|---|---|---|",
        ]
        tools = sorted({r[2] for r in rows if r[0] == kind}, key=lambda t: [r[2] for r in rows].index(t))
        ef = stats(kind, "erofsfuse 1.9 (mkfs.erofs 1.9 image)", 3)[0]
        sq = stats(kind, "squashfuse_ll 0.6", 3)[0]
        for t in tools:
            med, lo, hi = stats(kind, t, 3)
            cpu = stats(kind, t, 4)
            lines.append(
                f"| {t} | {med:.3f} ({lo:.3f}–{hi:.3f}) | {1361.95 / med:.0f} | {cpu[0]:.2f} ({cpu[1]:.2f}–{cpu[2]:.2f}) "
                f"| {ef / med:.2f}× | {sq / med:.2f}× |"
            )
        lines.append("")
    text = "\n".join(lines)
    print(text)
    doc = os.path.join(REPO, "docs", "benchmarks.md")
    old = open(doc).read()
    if HEADING in old:
        start = old.index(HEADING)
        nxt = old.find("\n## ", start + len(HEADING))
        old = old[:start] + text + (old[nxt:] if nxt >= 0 else "\n")
    else:
        old = old.rstrip("\n") + "\n\n" + text
    open(doc, "w").write(old)


if __name__ == "__main__":
    main()
