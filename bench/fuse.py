#!/usr/bin/env python3
"""FUSE read benchmarks: `sealfs mount` against the kernel EROFS mount, squashfuse and the kernel SquashFS mount.

    bench/fuse.py [TABLE...]     (RUNS=5, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus)

TABLE is any of seq, rand, meta, xattr, verify (default: all). Every table is one run with the tools
interleaved (A B C A B C ...), after an untimed warm-up round; medians of RUNS with min and max.

States (say which one every number is):
  cold       sync; drop_caches; then mount (drop_caches does not empty a FUSE daemon, so every run mounts
             afresh), time, unmount.
  warm-image the image file is in the page cache (read once), the mount is fresh: what the file system
             itself costs, as after a remount.
  warm       the mount has read everything once (untimed); the timed run repeats it.

Images (built once into a work dir under CORPUS_DIR):
  big        the `big` file (linux.tar, 1.36 GB) alone: sealfs sealed, uncompressed and lz4hc -C 65536;
             the kernel mounts the very same sealfs files (file-backed: mount(2) of the file); squashfs uncompressed and lz4 -Xhc -b 65536.
  linux      the linux tree, uncompressed: sealfs sealed (kernel mounts the same file), squashfs.
  xattr      the linux tree's names with empty files each carrying `user.origin` (so every inode has an
             xattr area): sealfs with and without the xattr bloom filter.

Writes bench/results/fuse-<stamp>.csv, a section of docs/benchmarks.md and docs/bench-fuse.png.
"""
import csv
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kmount  # noqa: E402  (file-backed kernel mounts)
REPO = os.path.dirname(HERE)
RUNS = int(os.environ.get("RUNS", "5"))
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))
HEADING = "## FUSE mount: reads against the kernel and squashfuse"
ROWS = []  # (table, state, round, tool, metric, value)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw).stdout


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def warm_file(path):
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)


class Mount:
    """One way of mounting an image: kind is sealfs, erofs, squashfs or squashfuse."""

    def __init__(self, name, kind, image, args=()):
        self.name, self.kind, self.image, self.args = name, kind, image, list(args)
        self.mp = tempfile.mkdtemp(prefix="sealfs-bench-mnt-")

    def mount(self):
        if self.kind == "sealfs":
            sh([SEALFS, "mount", *self.args, self.image, self.mp])
        elif self.kind == "erofs":
            # File-backed (Linux 6.12+): mount(2) of the image file, as the standard asks.
            kmount.mount_file(self.image, self.mp)
        elif self.kind == "squashfs":
            sh(["mount", "-t", "squashfs", "-o", "loop,ro", self.image, self.mp])
        elif self.kind == "squashfuse":
            sh(["squashfuse", self.image, self.mp])
        deadline = time.time() + 10
        while not os.path.ismount(self.mp):
            if time.time() > deadline:
                raise RuntimeError(f"{self.name}: not mounted")
            time.sleep(0.02)

    def umount(self):
        if not os.path.ismount(self.mp):
            return
        if self.kind == "sealfs":
            sh([SEALFS, "umount", self.mp])
        elif self.kind == "squashfuse":
            sh(["fusermount3", "-u", self.mp])
        else:
            sh(["umount", self.mp])
        deadline = time.time() + 10
        while os.path.ismount(self.mp) and time.time() < deadline:
            time.sleep(0.02)
        # Let a FUSE daemon exit before the next mount (its memory is measured per run).
        time.sleep(0.1)

    def daemon_pid(self):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if self.mp.encode() in cmd and any(c.endswith(b"sealfs") or c.endswith(b"squashfuse") for c in cmd[:1]):
                return int(pid)
        return None

    def hwm_kib(self):
        pid = self.daemon_pid()
        if pid is None:
            return None
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return None


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_state(table, state, mounts, op, metric="seconds", after=None):
    """Runs `op(mount)` for every mount, interleaved, in `state`; records RUNS rounds after a warm-up."""
    for rnd in range(RUNS + 1):
        for m in mounts:
            m.umount()
            if state == "cold":
                drop_caches()
            else:
                warm_file(m.image)
            m.mount()
            if state == "warm":
                op(m)
            value = op(m)
            if after:
                after(m, rnd)
            m.umount()
            if rnd > 0:
                ROWS.append((table, state, rnd, m.name, metric, value))
        print(f"[{table} {state}] round {rnd}/{RUNS}", file=sys.stderr)


def build_images(work):
    imgs = {}
    big_src = os.path.join(CORPUS, "big")
    linux_src = os.path.join(CORPUS, "linux", "linux-source-6.1")
    for corpus in ("big", "linux"):
        if not os.path.isdir(os.path.join(CORPUS, corpus)):
            subprocess.run(["bash", os.path.join(HERE, "corpus.sh"), corpus], check=True)

    def img(name, cmd):
        path = os.path.join(work, name)
        if not os.path.exists(path):
            print(f"[images] {name}", file=sys.stderr)
            sh(cmd(path))
        imgs[name] = path
        return path

    # The big directory holds only linux.tar (plus the corpus markers, excluded).
    ex = ["--exclude-path", ".done", "--exclude-path", "VERSION"]
    img("big.sealfs", lambda p: [SEALFS, "build", "-q", "-T", "0", *ex, big_src, p])
    img("big-lz4hc.sealfs", lambda p: [SEALFS, "build", "-q", "-T", "0", *ex, "-z", "lz4hc", "-C", "65536", big_src, p])
    sqx = ["-e", ".done", "VERSION"]
    img("big.sqfs", lambda p: ["mksquashfs", big_src, p, "-noappend", "-quiet", "-no-progress", "-noI", "-noId", "-noD", "-noF", "-noX", *sqx])
    img("big-lz4hc.sqfs", lambda p: ["mksquashfs", big_src, p, "-noappend", "-quiet", "-no-progress", "-comp", "lz4", "-Xhc", "-b", "65536", *sqx])
    img("linux.sealfs", lambda p: [SEALFS, "build", "-q", "-T", "0", linux_src, p])
    img("linux.sqfs", lambda p: ["mksquashfs", linux_src, p, "-noappend", "-quiet", "-no-progress", "-noI", "-noId", "-noD", "-noF", "-noX"])
    # The xattr tree: the linux tree's directories and names, empty files with one xattr each.
    xsrc = os.path.join(work, "xattr-src")
    if not os.path.exists(os.path.join(xsrc, ".done")):
        shutil.rmtree(xsrc, ignore_errors=True)
        for root, dirs, files in os.walk(linux_src):
            rel = os.path.relpath(root, linux_src)
            d = os.path.join(xsrc, rel)
            os.makedirs(d, exist_ok=True)
            for f in files:
                p = os.path.join(d, f)
                open(p, "w").close()
                os.setxattr(p, "user.origin", b"linux-source-6.1")
        open(os.path.join(xsrc, ".done"), "w").close()
    img("xattr-filter.sealfs", lambda p: [SEALFS, "build", "-q", "-T", "0", xsrc, p])
    img("xattr-nofilter.sealfs", lambda p: [SEALFS, "build", "-q", "-T", "0", "--no-xattr-filter", xsrc, p])
    return imgs


def seq_table(imgs):
    """Sequential read of linux.tar: seconds for `cat FILE > /dev/null`."""
    digest = sh([SEALFS, "digest", imgs["big.sealfs"]]).strip()
    mounts = [
        Mount("sealfs (FUSE, verified)", "sealfs", imgs["big.sealfs"], ["--digest", digest]),
        Mount("kernel EROFS", "erofs", imgs["big.sealfs"]),
        Mount("squashfuse", "squashfuse", imgs["big.sqfs"]),
        Mount("kernel SquashFS", "squashfs", imgs["big.sqfs"]),
        Mount("sealfs lz4hc (FUSE, verified)", "sealfs", imgs["big-lz4hc.sealfs"]),
        Mount("kernel EROFS lz4hc", "erofs", imgs["big-lz4hc.sealfs"]),
        Mount("squashfuse lz4hc", "squashfuse", imgs["big-lz4hc.sqfs"]),
    ]
    hwm = {}

    def op(m):
        return timed(lambda: subprocess.run(["cat", os.path.join(m.mp, "linux.tar")], stdout=subprocess.DEVNULL, check=True))

    def after(m, rnd):
        if m.kind == "sealfs":
            hwm.setdefault(m.name, []).append(m.hwm_kib())

    for state in ("cold", "warm-image", "warm"):
        run_state("seq", state, mounts, op, after=after)
    return hwm


def fio_iops(path, jobs, region):
    out = sh(["fio", "--name=rand", f"--filename={path}", "--rw=randread", "--bs=4k", "--ioengine=psync", "--iodepth=1",
              f"--numjobs={jobs}", "--direct=1", f"--size={region}", "--time_based", "--runtime=6", "--randrepeat=1",
              "--group_reporting", "--output-format=json"])
    data = json.loads(out[out.index("{"):])
    return data["jobs"][0]["read"]["iops"]


def rand_table(imgs):
    """fio random 4 KiB reads (psync, O_DIRECT so the page cache does not answer) over the first 32 MiB
    of the lz4hc linux.tar: read IOPS, cluster cache on (default 64 MiB) vs off."""
    mounts = [
        Mount("sealfs lz4hc, cache on", "sealfs", imgs["big-lz4hc.sealfs"]),
        Mount("sealfs lz4hc, cache off", "sealfs", imgs["big-lz4hc.sealfs"], ["--cluster-cache", "0"]),
        Mount("squashfuse lz4hc", "squashfuse", imgs["big-lz4hc.sqfs"]),
        Mount("sealfs uncompressed", "sealfs", imgs["big.sealfs"]),
    ]
    for jobs in (1, 2):
        run_state(f"rand-{jobs}job", "warm-image", mounts, lambda m: fio_iops(os.path.join(m.mp, "linux.tar"), jobs, "32M"), metric="iops")


def meta_table(imgs):
    """Metadata over the linux tree: ls -lR, find, lstat of every file in random order."""
    mounts = [
        Mount("sealfs (FUSE, verified)", "sealfs", imgs["linux.sealfs"]),
        Mount("kernel EROFS", "erofs", imgs["linux.sealfs"]),
        Mount("squashfuse", "squashfuse", imgs["linux.sqfs"]),
        Mount("kernel SquashFS", "squashfs", imgs["linux.sqfs"]),
    ]
    # The path list, from the source (same names in every image).
    src = os.path.join(CORPUS, "linux", "linux-source-6.1")
    rels = []
    for root, dirs, files in os.walk(src):
        r = os.path.relpath(root, src)
        rels.extend(os.path.normpath(os.path.join(r, n)) for n in dirs + files)
    random.Random(7).shuffle(rels)
    ops = {
        "ls -lR": lambda m: timed(lambda: subprocess.run(["ls", "-lR", m.mp], stdout=subprocess.DEVNULL, check=True)),
        "find": lambda m: timed(lambda: subprocess.run(["find", m.mp], stdout=subprocess.DEVNULL, check=True)),
        "stat all (random order)": lambda m: timed(lambda: [os.lstat(os.path.join(m.mp, r)) for r in rels]),
    }
    for name, op in ops.items():
        for state in ("cold", "warm"):
            run_state(f"meta {name}", state, mounts, op)


def xattr_table(imgs):
    """getxattr("security.capability") on every file (absent everywhere), filter on vs off."""
    mounts = [
        Mount("sealfs FUSE, filter on", "sealfs", imgs["xattr-filter.sealfs"]),
        Mount("sealfs FUSE, filter off", "sealfs", imgs["xattr-nofilter.sealfs"]),
        Mount("kernel EROFS, filter on", "erofs", imgs["xattr-filter.sealfs"]),
        Mount("kernel EROFS, filter off", "erofs", imgs["xattr-nofilter.sealfs"]),
    ]
    src = os.path.join(os.path.dirname(imgs["xattr-filter.sealfs"]), "xattr-src")
    rels = []
    for root, dirs, files in os.walk(src):
        r = os.path.relpath(root, src)
        rels.extend(os.path.normpath(os.path.join(r, n)) for n in files if n != ".done")

    def op(m):
        paths = [os.path.join(m.mp, r) for r in rels]
        for p in paths:  # entries and attributes cached first: the timed part is the xattr lookups
            os.lstat(p)

        def lookups():
            for p in paths:
                try:
                    os.getxattr(p, "security.capability", follow_symlinks=False)
                except OSError:
                    pass
        return timed(lookups)

    run_state("xattr", "warm-image", mounts, op)


def verify_table(imgs):
    """Verification cost on sequential reads of linux.tar, warm image, fresh mount."""
    digest = sh([SEALFS, "digest", imgs["big.sealfs"]]).strip()
    mounts = [
        Mount("sealfs --verify=none", "sealfs", imgs["big.sealfs"], ["--verify=none"]),
        Mount("sealfs (verified, self-consistent)", "sealfs", imgs["big.sealfs"]),
        Mount("sealfs --digest (authenticated)", "sealfs", imgs["big.sealfs"], ["--digest", digest]),
        Mount("sealfs --verify=double", "sealfs", imgs["big.sealfs"], ["--verify=double"]),
    ]
    stats = {}

    def op(m):
        el = timed(lambda: subprocess.run(["cat", os.path.join(m.mp, "linux.tar")], stdout=subprocess.DEVNULL, check=True))
        stats[m.name] = json.loads(sh([SEALFS, "stats", "--json", m.mp]))
        return el

    for state in ("warm-image", "warm"):
        run_state("verify", state, mounts, op)
    return stats


def med(table, state, tool):
    v = [r[5] for r in ROWS if r[0] == table and r[1] == state and r[3] == tool]
    return (statistics.median(v), min(v), max(v)) if v else None


def report(tables, hwm, vstats):
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    csv_path = os.path.join(HERE, "results", f"fuse-{stamp}.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["table", "state", "round", "tool", "metric", "value"])
        w.writerows(ROWS)
    cpu = sh(["grep", "-m1", "model name", "/proc/cpuinfo"]).split(":", 1)[1].strip()
    ver = {p: sh(["dpkg-query", "-W", "-f", "${Version}", p]) for p in ("squashfuse", "squashfs-tools", "fio", "fuse3")}
    out = [HEADING, "",
           f"Measured {time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())} with `bench/fuse.py`; raw runs in `bench/results/{os.path.basename(csv_path)}`.", "",
           f"- Machine: nproc {os.cpu_count()}, {cpu}, kernel {os.uname().release}; images on ext4; load average at the end {os.getloadavg()[0]:.2f}.",
           f"- Versions: {sh([SEALFS, '--version']).strip()}, squashfuse {ver['squashfuse']}, squashfs-tools {ver['squashfs-tools']}, fio {ver['fio']}, fuse3 {ver['fuse3']}.",
           f"- Method: {RUNS} rounds after an untimed one, tools interleaved; every run mounts afresh. cold = sync + drop_caches before mounting; warm-image = image file in the page cache, fresh mount; warm = the same operation once untimed on this mount first.",
           "- The kernel EROFS rows mount the very same sealfs image files file-backed (mount(2) of the file, `bench/kmount.py`; through a loop device before 2026-12-05) (no verification in the kernel: this kernel has no fs-verity); squashfs images hold the same data (uncompressed, or lz4 -Xhc with 64 KiB blocks beside sealfs lz4hc -C 65536).", ""]
    lines_targets = []

    def table_md(table, states, tools, unit="s", better="lower"):
        out.append(f"| {table} | " + " | ".join(states) + " |")
        out.append("|---|" + "---:|" * len(states))
        for t in tools:
            cells = []
            for s in states:
                m = med(table, s, t)
                cells.append("–" if m is None else (f"{m[0]:.3f} ({m[1]:.3f}–{m[2]:.3f})" if unit == "s" else f"{m[0]:.0f} ({m[1]:.0f}–{m[2]:.0f})"))
            out.append(f"| {t} | " + " | ".join(cells) + " |")
        out.append("")

    def ratio(table, state, a, b, inverse=False):
        ma, mb = med(table, state, a), med(table, state, b)
        if not ma or not mb:
            return None
        return (ma[0] / mb[0]) if inverse else (mb[0] / ma[0])

    if "seq" in tables:
        out += ["### Sequential read of `big` (1.36 GB linux.tar): seconds, median (min–max)", ""]
        tools = sorted({r[3] for r in ROWS if r[0] == "seq"}, key=lambda t: [r[3] for r in ROWS if r[0] == "seq"].index(t))
        table_md("seq", ["cold", "warm-image", "warm"], tools)
        for st in ("cold", "warm-image", "warm"):
            r = ratio("seq", st, "sealfs (FUSE, verified)", "kernel EROFS")
            q = ratio("seq", st, "sealfs (FUSE, verified)", "squashfuse")
            lines_targets.append((f"sequential {st}: sealfs speed vs kernel EROFS (≥ 0.7×)", r, r is not None and r >= 0.7))
            lines_targets.append((f"sequential {st}: sealfs speed vs squashfuse (≥ 2×)", q, q is not None and q >= 2))
        if hwm:
            for name, v in hwm.items():
                v = [x for x in v if x]
                if v:
                    out.append(f"- Peak resident size of the `{name}` daemon over a whole read of `big`: {max(v)/1024:.1f} MiB (cluster cache 64 MiB, block cache 16 MiB, hash cache 4 MiB configured: the mount defaults).")
            out.append("")
    for jobs in (1, 2):
        t = f"rand-{jobs}job"
        if any(r[0] == t for r in ROWS):
            out += [f"### fio random 4 KiB reads, psync, O_DIRECT, {jobs} job(s), first 32 MiB of the lz4hc `big`: IOPS, median (min–max)", ""]
            tools = list(dict.fromkeys(r[3] for r in ROWS if r[0] == t))
            table_md(t, ["warm-image"], tools, unit="iops")
            r = ratio(t, "warm-image", "sealfs lz4hc, cache off", "sealfs lz4hc, cache on")
            lines_targets.append((f"random reads, {jobs} job(s): cluster cache on vs off (≥ 2.7×)", r, r is not None and r >= 2.7))
    meta = [t for t in dict.fromkeys(r[0] for r in ROWS) if t.startswith("meta")]
    if meta:
        out += ["### Metadata over the `linux` tree (78,579 files): seconds, median (min–max)", ""]
        for t in meta:
            tools = list(dict.fromkeys(r[3] for r in ROWS if r[0] == t))
            table_md(t, ["cold", "warm"], tools)
            for st in ("cold", "warm"):
                r = ratio(t, st, "kernel EROFS", "sealfs (FUSE, verified)")
                lines_targets.append((f"{t[5:]} {st}: sealfs time / kernel time (≤ 1.5×)", r, r is not None and r <= 1.5))
    if "xattr" in tables:
        out += ["### `getxattr security.capability` (absent) on every file of the xattr tree: seconds, median (min–max)", ""]
        tools = list(dict.fromkeys(r[3] for r in ROWS if r[0] == "xattr"))
        table_md("xattr", ["warm-image"], tools)
        for where in ("sealfs FUSE", "kernel EROFS"):
            on, off = med("xattr", "warm-image", f"{where}, filter on"), med("xattr", "warm-image", f"{where}, filter off")
            if on and off:
                gain = off[0] / on[0] - 1
                lines_targets.append((f"{where}: filter on faster than off by (≥ 20%)", gain, gain >= 0.2))
    if "verify" in tables:
        out += ["### Verification cost, sequential read of `big`: seconds, median (min–max)", "",
                "warm-image: image file cached, fresh mount (every block hashed); warm: the mount's page cache holds the file (verified once when it was read, nothing to hash)", ""]
        tools = list(dict.fromkeys(r[3] for r in ROWS if r[0] == "verify"))
        table_md("verify", ["warm-image", "warm"], tools)
        for st in ("warm-image", "warm"):
            r = ratio("verify", st, "sealfs (verified, self-consistent)", "sealfs --verify=none")
            lines_targets.append((f"verification {st}: default speed vs none (≥ 0.9×)", r, r is not None and r >= 0.9))
        for name, s in vstats.items():
            v = s.get("verify")
            if v:
                share = v["hash_bytes_read"] / max(1, v["data_bytes_read"])
                out.append(f"- `{name}`: {v['data_bytes_read']} data bytes read, {v['hash_bytes_read']} hash bytes ({share:.2%}), {v['blocks_verified']} blocks verified, {v['failures']} failures.")
                if name == "sealfs (verified, self-consistent)":
                    lines_targets.append(("bytes read for integrity, share of data (≤ 1%)", share, share <= 0.01))
        for st in ("warm-image", "warm"):
            r = ratio("verify", st, "sealfs --verify=double", "sealfs (verified, self-consistent)")
            if r is not None:
                out.append(f"- {st}: double verification (each file's content also hashed whole against its recorded digest before its first read, as checking per-file digests costs without kernel fs-verity) runs at {r:.2f}× the speed of default (single) verification.")
        out.append("")
    out += ["### Targets", "", "| target | figure | met? |", "|---|---:|---|"]
    for name, fig, ok in lines_targets:
        f = "–" if fig is None else (f"{fig:.0%}" if "%" in name else f"{fig:.2f}×")
        out.append(f"| {name} | {f} | {'met' if ok else '**not met**'} |")
    out += ["", "![FUSE benchmark](bench-fuse.png)", ""]
    text = "\n".join(out)
    doc_path = os.path.join(REPO, "docs", "benchmarks.md")
    doc = open(doc_path).read()
    pat = re.compile(r"^" + re.escape(HEADING) + r"[ \t]*\n.*?(?=^## |\Z)", re.M | re.S)
    doc = pat.sub(lambda _: text + "\n", doc, count=1) if pat.search(doc) else doc.rstrip("\n") + "\n\n" + text + "\n"
    open(doc_path, "w").write(doc)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        groups = [t for t in dict.fromkeys(r[0] for r in ROWS)]
        fig, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 4.5), squeeze=False)
        for ax, g in zip(axes[0], groups):
            states = list(dict.fromkeys(r[1] for r in ROWS if r[0] == g))
            tools = list(dict.fromkeys(r[3] for r in ROWS if r[0] == g))
            w = 0.8 / max(1, len(states))
            for i, s in enumerate(states):
                vals = [(med(g, s, t) or (0, 0, 0))[0] for t in tools]
                ax.bar([x + i * w for x in range(len(tools))], vals, w, label=s)
            ax.set_xticks([x + w * (len(states) - 1) / 2 for x in range(len(tools))], [t.replace(" (", "\n(").replace(", ", ",\n") for t in tools], fontsize=6, rotation=60, ha="right")
            unit = next(r[4] for r in ROWS if r[0] == g)
            ax.set_title(g, fontsize=9)
            ax.set_ylabel(unit)
            ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(REPO, "docs", "bench-fuse.png"), dpi=90)
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
    print(text)


def load_earlier(tables):
    """Rows of tables not measured in this run, from the CSVs named in FUSE_MERGE (comma-separated,
    oldest first; a table is taken from the newest file that has it), so that one report can combine
    runs made at different times (each table is still one run, tools interleaved)."""
    for path in reversed(list(filter(None, os.environ.get("FUSE_MERGE", "").split(",")))):
        found = set()
        with open(path) as f:
            for r in csv.DictReader(f):
                base = r["table"].split(" ")[0].split("-")[0]
                if base in tables or base in tables_seen:
                    continue
                found.add(base)
                ROWS.append((r["table"], r["state"], int(r["round"]), r["tool"], r["metric"], float(r["value"])))
        tables_seen.update(found)


tables_seen = set()


def main():
    tables = sys.argv[1:] or ["seq", "rand", "meta", "xattr", "verify"]
    work = os.path.join(CORPUS, "fuse-images")
    os.makedirs(work, exist_ok=True)
    imgs = build_images(work)
    hwm, vstats = {}, {}
    if "seq" in tables:
        hwm = seq_table(imgs)
    if "rand" in tables:
        rand_table(imgs)
    if "meta" in tables:
        meta_table(imgs)
    if "xattr" in tables:
        xattr_table(imgs)
    if "verify" in tables:
        vstats = verify_table(imgs)
    load_earlier(tables)
    report(tables + sorted(tables_seen), hwm, vstats)


if __name__ == "__main__":
    main()
