#!/usr/bin/env python3
"""FUSE reads against the current peers: `sealfs mount` against erofsfuse 1.9 and squashfuse_ll 0.6
(issue 17).

    bench/fusepeers.py [seq] [ls] [rand]     (default: seq and ls)
    bench/fusepeers.py uring
    bench/fusepeers.py floor

RUNS=5, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus; MKFS_EROFS, EROFSFUSE, SQUASHFUSE_LL:
the peers, by default the ones scripts/build-oracles.sh builds into target/oracles/ (squashfuse 0.6
needs `SQUASHFUSE_SRC=... scripts/build-oracles.sh squashfuse`).

seq: `cat big > /dev/null` (linux.tar, 1.36 GB) on a fresh mount with the image in the page cache
(warm-image: what the FUSE file system itself costs), every tool in turn, RUNS rounds after an
untimed warm-up round: medians with min and max, of the wall time and of the daemon's CPU time
(user + system, from /proc/PID/stat). Each peer reads the image its own builder made with the same
settings (lz4hc, 64 KiB clusters or blocks; and uncompressed); erofsfuse also reads sealfs's
image (the same bytes the sealfs rows read).

ls: `ls -lR` of the linux tree on a fresh mount, image in the page cache, the same tools and the
kernel's EROFS (file-backed mount of the sealfs image: mount(2) of the file, bench/kmount.py;
before 2026-12-05 this row was mount(8), which set up a loop device).

rand: fio random 4 KiB reads (psync, O_DIRECT: the page cache never answers; `--randrepeat=1`, so
every run reads the same offsets) over the first 32 MiB of `big`, 16,384 reads per job, 1 and 2
jobs, image in the page cache: on a fresh mount (cold: sealfs's cluster cache empty), then the same
reads again on that mount (warm). Read IOPS, median (min-max) of RUNS rounds, tools interleaved,
for sealfs (verified, over /dev/fuse and, where the kernel has it, over io_uring with the fuse
module's enable_uring set to Y for the table and back after; and `--verify=none`), erofsfuse 1.9 and squashfuse_ll 0.6 on their own
builders' images, on the lz4hc and uncompressed images (not the kernel: O_DIRECT reads of a
file-backed EROFS mount fail). Writes
bench/results/fusepeers-rand-<stamp>.csv and prints its tables (docs/benchmarks.md is left alone).

floor: what bounds the seq table's target on this machine: `cat big` on sealfs (verified and
`--verify=none`) and erofsfuse at 1 MiB readahead, interleaved, RUNS rounds after a warm-up: wall
time, the daemon's CPU and `cat`'s (its rusage: the kernel's copy out of the page cache is
charged to it); and OpenSSL's SHA-256 speed on 1 MiB inputs (`openssl speed -evp sha256`). The
floor of a verified read is what the cheaper unverified daemon and `cat` spend, plus hashing
every byte of the image (at OpenSSL's speed, or the CPU verifying adds to sealfs's daemon, whichever
is less), spread over both cores.

uring: `sealfs mount` (verified) over /dev/fuse (`--transport=dev`) against the same over FUSE over
io_uring (`--transport=uring`; the fuse module's enable_uring is set to Y for the run and back
after), interleaved, RUNS rounds: the rand table's fio reads (1 and 2 jobs, cold and warm) on the
lz4hc and uncompressed images; `lstat` of STAT_PATHS paths (200,000 by default: the linux tree's directories and names, copied
under 1/, 2/, 3/ with every file empty; before 2026-12-06 the linux tree's own 83.7 k paths), in
walk order, from this process, on a fresh mount, so that each is a LOOKUP the daemon answers;
and `cat big` (seq); URING_TABLES (default "rand stat seq") runs some of them. Writes
bench/results/fusepeers-uring-<stamp>.csv and prints its tables.

Writes bench/results/fusepeers-<stamp>.csv and a section of docs/benchmarks.md per table.

A subset: SEQ_TOOLS, a `;`-separated list of the seq table's row names (`kernel*`: the rows
whose names begin with `kernel`), runs only those rows of the seq table, adding two kernel rows
(file-backed by mount(2) of the image file; mount(8), a loop device, at 1 MiB readahead), and
builds only their images; BEFORE=another sealfs binary adds its verified row ("sealfs mount (verified),
BEFORE"). A subset prints its table and ratios and leaves docs/benchmarks.md alone.
"""
import contextlib
import csv
import json
import os
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
ORACLES = os.path.join(REPO, "target/oracles")
MKFS = os.environ.get("MKFS_EROFS", os.path.join(ORACLES, "erofs-utils-1.9/bin/mkfs.erofs"))
EROFSFUSE = os.environ.get("EROFSFUSE", os.path.join(ORACLES, "erofs-utils-1.9/bin/erofsfuse"))
SQUASHFUSE = os.environ.get("SQUASHFUSE_LL", os.path.join(ORACLES, "squashfuse-0.6/bin/squashfuse_ll"))
HEADING = "## FUSE sequential reads against erofsfuse 1.9 and squashfuse_ll 0.6 (issue 17)"
TICK = os.sysconf("SC_CLK_TCK")
SEQ_TOOLS = [t.strip() for t in os.environ.get("SEQ_TOOLS", "").split(";") if t.strip()]
BEFORE = os.environ.get("BEFORE")


def selected(name):
    """Whether SEQ_TOOLS names the row (a name ending in `*` names the rows it begins)."""
    return not SEQ_TOOLS or any(
        name == t or (t.endswith("*") and name.startswith(t[:-1])) for t in SEQ_TOOLS)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw).stdout


def version(cmd, want=""):
    """The first line of `cmd`'s output that contains `want`."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    lines = [line for line in out.strip().splitlines() if want in line]
    return lines[0] if lines else "?"


class Mount:
    def __init__(self, name, argv, image, ra_kb=None):
        self.name, self.argv, self.image, self.ra_kb = name, argv, image, ra_kb
        self.mp = tempfile.mkdtemp(prefix="sealfs-peers-")

    def mount(self):
        subprocess.run(["cat", self.image], stdout=subprocess.DEVNULL, check=True)
        if self.argv == ["kernel"]:
            # File-backed (Linux 6.12+): mount(2) with the image file as the source.
            kmount.mount_file(self.image, self.mp)
        elif self.argv == ["kernel-loop"]:
            sh(["mount", "-t", "erofs", "-o", "ro,loop", self.image, self.mp])
        else:
            sh([*self.argv, self.image, self.mp])
        deadline = time.time() + 10
        while not os.path.ismount(self.mp):
            if time.time() > deadline:
                raise RuntimeError(f"{self.name}: not mounted")
            time.sleep(0.02)
        if self.ra_kb is not None:
            # By hand, as a user tuning a peer would: the mount's readahead in sysfs.
            dev = os.stat(self.mp).st_dev
            with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb", "w") as f:
                f.write(f"{self.ra_kb}\n")

    def umount(self):
        subprocess.run(["umount", self.mp], check=True)
        time.sleep(0.2)

    def cpu(self):
        """User + system seconds of the daemon serving the mount (0 for a kernel mount)."""
        if self.argv in (["kernel"], ["kernel-loop"]):
            return 0.0
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


def images(work, wanted=None):
    """The images' paths by name; those in `wanted` (all when None) built if missing."""
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
        made[name] = path
        if wanted is not None and name not in wanted:
            return
        if not os.path.exists(path):
            print(f"[images] {name}", file=sys.stderr)
            sh(cmd(path))

    img("sealfs-lz4hc", lambda p: [SEALFS, "build", "-q", "-z", "lz4hc", "-C", "65536", tree, p])
    img("mkfs-lz4hc", lambda p: [MKFS, "-zlz4hc", "-C65536", p, tree])
    img("sqfs-lz4hc", lambda p: ["mksquashfs", tree, p, "-noappend", "-quiet", "-no-progress", "-comp", "lz4", "-Xhc", "-b", "65536"])
    img("sealfs-plain", lambda p: [SEALFS, "build", "-q", tree, p])
    img("mkfs-plain", lambda p: [MKFS, p, tree])
    img("sqfs-plain", lambda p: ["mksquashfs", tree, p, "-noappend", "-quiet", "-no-progress", "-noI", "-noId", "-noD", "-noF", "-noX"])
    linux = os.path.join(CORPUS, "linux", "linux-source-6.1")
    if not os.path.isdir(linux) and (wanted is None or any("linux" in w for w in wanted)):
        subprocess.run(["bash", os.path.join(HERE, "corpus.sh"), "linux"], check=True)
    img("sealfs-linux", lambda p: [SEALFS, "build", "-q", linux, p])
    img("mkfs-linux", lambda p: [MKFS, p, linux])
    img("sqfs-linux", lambda p: ["mksquashfs", linux, p, "-noappend", "-quiet", "-no-progress", "-comp", "lz4", "-Xhc"])
    return made


def interleave(table, kind, mounts, op, rows):
    """RUNS rounds (after a warm-up) of `op(mountpoint)` on fresh mounts, tools interleaved."""
    for rnd in range(RUNS + 1):
        for m in mounts:
            m.mount()
            c0, t0 = m.cpu(), time.perf_counter()
            op(m.mp)
            t1, c1 = time.perf_counter(), m.cpu()
            m.umount()
            if rnd > 0:
                rows.append((table, kind, rnd, m.name, t1 - t0, c1 - c0))
        print(f"[{table} {kind}] round {rnd}/{RUNS}", file=sys.stderr)


def main():
    tables = sys.argv[1:] or ["seq", "ls"]
    work = os.path.join(CORPUS, "fusepeers")
    os.makedirs(work, exist_ok=True)
    if SEQ_TOOLS:
        tables = ["seq"]
        paths = images(work, wanted=set())
        wanted = {os.path.basename(m.image) for kind in ("lz4hc", "plain")
                  for m in seq_mounts(kind, paths, digest=None)}
        imgs = images(work, wanted)
    elif "ls" not in tables:
        # (Only `big`'s images: not the linux tree's.)
        imgs = images(work, {f"{b}-{k}" for b in ("sealfs", "mkfs", "sqfs") for k in ("lz4hc", "plain")})
    else:
        imgs = images(work)
    rows = []
    if "uring" in tables:
        uring(work)
        return
    if "floor" in tables:
        floor(imgs)
        return
    if "rand" in tables:
        rand(imgs)
    if "seq" in tables:
        for kind in ("lz4hc", "plain"):
            s = imgs[f"sealfs-{kind}"]
            digest = sh([SEALFS, "digest", s]).strip()
            mounts = seq_mounts(kind, imgs, digest)
            cat = lambda mp: subprocess.run(["cat", os.path.join(mp, "big")], stdout=subprocess.DEVNULL, check=True)
            interleave("seq", kind, mounts, cat, rows)
    if "ls" in tables:
        s = imgs["sealfs-linux"]
        digest = sh([SEALFS, "digest", s]).strip()
        mounts = [
            Mount("sealfs mount (verified)", [SEALFS, "mount", "--digest", digest], s),
            Mount("sealfs mount --verify=none", [SEALFS, "mount", "--verify=none"], s),
            Mount("sealfs mount (verified) --xattrs=on", [SEALFS, "mount", "--xattrs=on", "--digest", digest], s),
            Mount("erofsfuse 1.9 (mkfs.erofs 1.9 image)", [EROFSFUSE], imgs["mkfs-linux"]),
            Mount("erofsfuse 1.9 (the sealfs image)", [EROFSFUSE], s),
            Mount("squashfuse_ll 0.6 (lz4hc image)", [SQUASHFUSE], imgs["sqfs-linux"]),
            Mount("kernel EROFS (the sealfs image, file-backed)", ["kernel"], s),
        ]
        ls = lambda mp: subprocess.run(["ls", "-lR", mp], stdout=subprocess.DEVNULL, check=True)
        interleave("ls", "linux", mounts, ls, rows)
    if not rows:
        return
    write_results("fusepeers", ["table", "image", "round", "tool", "seconds", "daemon_cpu_seconds"], rows)
    if SEQ_TOOLS:
        report_subset(rows)
    elif "seq" in tables:
        report(rows, imgs)
    if "ls" in tables:
        report_ls(rows, imgs)


def write_results(name, header, rows):
    """bench/results/NAME-<stamp>.csv."""
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(HERE, "results", f"{name}-{stamp}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def fio_iops(path, jobs):
    """Read IOPS of 16,384 random 4 KiB reads per job over the first 32 MiB of `path`."""
    out = sh(["fio", "--name=rand", f"--filename={path}", "--rw=randread", "--bs=4k", "--ioengine=psync",
              "--iodepth=1", f"--numjobs={jobs}", "--direct=1", "--size=32M", "--io_size=64M",
              "--randrepeat=1", "--group_reporting", "--output-format=json"])
    return json.loads(out[out.index("{"):])["jobs"][0]["read"]["iops"]


def rand(imgs):
    """The rand table (see the module's docstring)."""
    if not os.path.exists(ENABLE_URING):
        return rand_rows(imgs)
    with uring_enabled():
        return rand_rows(imgs)


def rand_rows(imgs):
    """The rand table's runs and report, with a row over io_uring when the kernel has it."""
    rows = []
    for kind in ("lz4hc", "plain"):
        s = imgs[f"sealfs-{kind}"]
        digest = sh([SEALFS, "digest", s]).strip()
        mounts = [
            Mount("sealfs mount (verified)", [SEALFS, "mount", "--digest", digest], s),
            Mount("sealfs mount --verify=none", [SEALFS, "mount", "--verify=none"], s),
            Mount("erofsfuse 1.9 (mkfs.erofs 1.9 image)", [EROFSFUSE], imgs[f"mkfs-{kind}"]),
            Mount("squashfuse_ll 0.6", [SQUASHFUSE], imgs[f"sqfs-{kind}"]),
        ]
        if os.path.exists(ENABLE_URING):
            mounts.insert(1, Mount("sealfs mount (verified), io_uring",
                                   [SEALFS, "mount", "--transport=uring", "--digest", digest], s))
        for rnd in range(1, RUNS + 1):
            for jobs in (1, 2):
                for m in (mounts if rnd % 2 else mounts[::-1]):
                    m.mount()
                    cold = fio_iops(os.path.join(m.mp, "big"), jobs)
                    warm = fio_iops(os.path.join(m.mp, "big"), jobs)
                    m.umount()
                    rows += [(kind, rnd, m.name, jobs, "cold", cold), (kind, rnd, m.name, jobs, "warm", warm)]
            print(f"[rand {kind}] round {rnd}/{RUNS}", file=sys.stderr)
    write_results("fusepeers-rand", ["image", "round", "tool", "jobs", "cache", "iops"], rows)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"median (min–max) of {RUNS} rounds, tools interleaved; load average {' '.join(load)}")
    for kind in ("lz4hc", "plain"):
        mine = [r for r in rows if r[0] == kind]
        tools = list(dict.fromkeys(r[2] for r in mine))
        cols = [(j, c) for j in (1, 2) for c in ("cold", "warm")]

        def med(tool, jobs, cache):
            return [r[5] for r in mine if r[2] == tool and r[3] == jobs and r[4] == cache]

        print(f"\n### fio random 4 KiB reads, {kind}: read IOPS\n")
        print("| tool | " + " | ".join(f"{j} job{'s' * (j > 1)}, {c}" for j, c in cols)
              + " | verified / erofsfuse, squashfuse_ll (2 jobs, warm) |")
        print("|---|" + "---:|" * len(cols) + "---|")
        for t in tools:
            cells = []
            for j, c in cols:
                v = med(t, j, c)
                cells.append(f"{statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f})")
            ratio = ""
            if t.startswith("sealfs mount (verified)"):
                me = statistics.median(med(t, 2, "warm"))
                ratio = ", ".join(f"{me / statistics.median(med(p, 2, 'warm')):.2f}×"
                                  for p in ("erofsfuse 1.9 (mkfs.erofs 1.9 image)", "squashfuse_ll 0.6"))
            print(f"| {t} | " + " | ".join(cells) + f" | {ratio} |")


ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


@contextlib.contextmanager
def uring_enabled():
    """The fuse module's enable_uring set to Y for the block, and back to what it was after."""
    before = open(ENABLE_URING).read().strip()
    with open(ENABLE_URING, "w") as f:
        f.write("Y\n")
    try:
        yield
    finally:
        with open(ENABLE_URING, "w") as f:
            f.write(before + "\n")


def sha256_rate():
    """OpenSSL's SHA-256 speed on 1 MiB inputs, bytes per second of one core: faster than on the
    4 KiB blocks a verifier hashes one by one (no per-input cost), so a floor made with it is
    lower than any verifier's on this CPU (sha_ni: OpenSSL and sealfs's `sha2` both use it)."""
    out = sh(["openssl", "speed", "-seconds", "3", "-bytes", "1048576", "-evp", "sha256"])
    line = [l for l in out.splitlines() if l.lower().startswith("sha256")][-1]
    return float(line.split()[-1].rstrip("k")) * 1000


def floor(imgs):
    """The floor table (see the module's docstring)."""
    rate = sha256_rate()
    rows = []
    for kind in ("plain", "lz4hc"):
        s = imgs[f"sealfs-{kind}"]
        digest = sh([SEALFS, "digest", s]).strip()
        mounts = [
            Mount("sealfs mount (verified)", [SEALFS, "mount", "--digest", digest], s),
            Mount("sealfs mount --verify=none", [SEALFS, "mount", "--verify=none"], s),
            Mount("erofsfuse 1.9, read_ahead_kb 1024 by hand", [EROFSFUSE], imgs[f"mkfs-{kind}"], ra_kb=1024),
        ]
        for rnd in range(RUNS + 1):
            for m in (mounts if rnd % 2 else mounts[::-1]):
                m.mount()
                c0, t0 = m.cpu(), time.perf_counter()
                cat = subprocess.Popen(["cat", os.path.join(m.mp, "big")], stdout=subprocess.DEVNULL)
                _, status, use = os.wait4(cat.pid, 0)
                t1, c1 = time.perf_counter(), m.cpu()
                m.umount()
                if status != 0:
                    raise RuntimeError(f"{m.name}: cat failed")
                if rnd > 0:
                    rows.append((kind, rnd, m.name, t1 - t0, c1 - c0, use.ru_utime + use.ru_stime))
            print(f"[floor {kind}] round {rnd}/{RUNS}", file=sys.stderr)
    write_results("fusepeers-floor", ["image", "round", "tool", "seconds", "daemon_cpu", "cat_cpu"], rows)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"median of {RUNS} rounds after a warm-up, tools interleaved; load average {' '.join(load)}; "
          f"OpenSSL SHA-256 on 1 MiB inputs: {rate / 1e9:.2f} GB/s on one core")
    print("\n| image | tool | seconds | daemon CPU s | `cat` CPU s | hashing the image alone, s of a core | "
          "two-core floor, s | 1.2× erofsfuse's speed, s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for kind in ("plain", "lz4hc"):
        size = os.path.getsize(imgs[f"sealfs-{kind}"])
        med = {}
        for t in dict.fromkeys(r[2] for r in rows if r[0] == kind):
            med[t] = [statistics.median(r[i] for r in rows if r[0] == kind and r[2] == t) for i in (3, 4, 5)]
        peer = med["erofsfuse 1.9, read_ahead_kb 1024 by hand"]
        none = med["sealfs mount --verify=none"]
        # Hashing every image byte: at OpenSSL's speed, or what verifying adds to sealfs's
        # daemon (verified less `--verify=none`), whichever is less.
        hash_s = min(size / rate, med["sealfs mount (verified)"][1] - none[1])
        # What a verified daemon cannot avoid: what the cheaper of the two unverified daemons
        # spends, what `cat` spends, and the hashing, on two cores.
        least = min(peer[1], none[1])
        for t, (sec, dcpu, ccpu) in med.items():
            extra = ""
            if t == "sealfs mount (verified)":
                extra = f" {hash_s:.3f} | {(least + min(peer[2], ccpu) + hash_s) / 2:.3f} | {peer[0] / 1.2:.3f} |"
            else:
                extra = " | | |"
            print(f"| {kind} | {t} | {sec:.3f} | {dcpu:.2f} | {ccpu:.2f} |{extra}")


def uring(work):
    """The uring table (see the module's docstring)."""
    imgs = images(work, {"sealfs-lz4hc", "sealfs-plain", "sealfs-linux"})
    linux = os.path.join(CORPUS, "linux", "linux-source-6.1")
    stat_image, paths = names_tree(work, linux)
    rows = []
    with uring_enabled():
        def pair(image):
            digest = sh([SEALFS, "digest", image]).strip()
            return [Mount(f"sealfs (verified), {t}", [SEALFS, "mount", f"--transport={t}", "--digest", digest], image)
                    for t in ("dev", "uring")]

        def rounds(table, kind, mounts, op):
            # A warm-up round, then RUNS, the order of the tools alternating.
            for rnd in range(RUNS + 1):
                for m in (mounts if rnd % 2 else mounts[::-1]):
                    m.mount()
                    ring0 = ring_requests(m.mp)
                    for sub, value in op(m.mp):
                        if rnd > 0:
                            rows.append((table, kind, rnd, m.name, sub, value))
                    if "uring" in m.name and ring_requests(m.mp) == ring0:
                        raise RuntimeError(f"{m.name}: no request came through the rings")
                    m.umount()
                print(f"[uring {table} {kind}] round {rnd}/{RUNS}", file=sys.stderr)

        def fio(mp):
            for jobs in (1, 2):
                yield f"{jobs} job{'s' * (jobs > 1)}, cold", fio_iops(os.path.join(mp, "big"), jobs)
                yield f"{jobs} job{'s' * (jobs > 1)}, warm", fio_iops(os.path.join(mp, "big"), jobs)

        def walk(mp):
            t0 = time.perf_counter()
            for p in paths:
                os.lstat(os.path.join(mp, p))
            yield "seconds", time.perf_counter() - t0

        def cat(mp):
            t0 = time.perf_counter()
            subprocess.run(["cat", os.path.join(mp, "big")], stdout=subprocess.DEVNULL, check=True)
            yield "seconds", time.perf_counter() - t0

        if "rand" in URING_TABLES:
            for kind in ("lz4hc", "plain"):
                rounds("rand", kind, pair(imgs[f"sealfs-{kind}"]), fio)
        if "stat" in URING_TABLES:
            rounds("stat", f"{len(paths)} paths", pair(stat_image), walk)
        if "seq" in URING_TABLES:
            for kind in ("lz4hc", "plain"):
                rounds("seq", kind, pair(imgs[f"sealfs-{kind}"]), cat)
    write_results("fusepeers-uring", ["table", "image", "round", "tool", "measure", "value"], rows)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"median (min–max) of {RUNS} rounds, tools interleaved; {len(paths)} paths; "
          f"load average {' '.join(load)}")
    for table in URING_TABLES:
        mine = [r for r in rows if r[0] == table]
        measures = list(dict.fromkeys(r[4] for r in mine))
        print(f"\n### {table}\n")
        print("| image | tool | " + " | ".join(measures) + " |")
        print("|---|---|" + "---:|" * len(measures))
        for kind in dict.fromkeys(r[1] for r in mine):
            tools = list(dict.fromkeys(r[3] for r in mine if r[1] == kind))
            meds = {}
            for t in tools:
                cells = []
                for ms in measures:
                    v = [r[5] for r in mine if r[1] == kind and r[3] == t and r[4] == ms]
                    meds[(t, ms)] = statistics.median(v)
                    fmt = "{:,.0f}" if table == "rand" else "{:.3f}"
                    cells.append(f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})")
                print(f"| {kind} | {t} | " + " | ".join(cells) + " |")
            dev, ur = tools
            print(f"| {kind} | uring / dev | " + " | ".join(
                f"{meds[(ur, ms)] / meds[(dev, ms)]:.2f}×" for ms in measures) + " |")


URING_TABLES = os.environ.get("URING_TABLES", "rand stat seq").split()
STAT_PATHS = int(os.environ.get("STAT_PATHS", "200000"))


def names_tree(work, linux):
    """The stat table's image and its first STAT_PATHS paths, in walk order: the linux tree's
    directories and names, copied under `1/`, `2/`, ... until there are that many, every file
    empty (a LOOKUP's answer does not depend on a file's size; the image stays small)."""
    tree = os.path.join(work, f"names-{STAT_PATHS}")
    image = tree + ".img"
    names = []
    for root, dirs, files in os.walk(linux):
        rel = os.path.relpath(root, linux)
        names += [(os.path.normpath(os.path.join(rel, n)), n in dirs) for n in dirs + files]
    copies = -(-STAT_PATHS // (len(names) + 1))
    if not os.path.exists(image):
        print(f"[images] {os.path.basename(image)}: {copies} copies of linux's {len(names)} names", file=sys.stderr)
        shutil.rmtree(tree, ignore_errors=True)
        for c in range(1, copies + 1):
            os.makedirs(os.path.join(tree, str(c)))
            for rel, is_dir in names:
                path = os.path.join(tree, str(c), rel)
                if is_dir:
                    os.mkdir(path)
                else:
                    open(path, "w").close()
        sh([SEALFS, "build", "-q", tree, image])
        shutil.rmtree(tree)
    paths = [str(c) for c in range(1, copies + 1)]
    paths += [os.path.join(str(c), rel) for c in range(1, copies + 1) for rel, _ in names]
    return image, paths[:STAT_PATHS]


def ring_requests(mp):
    """The requests a sealfs mount answered through io_uring rings so far."""
    out = sh([SEALFS, "stats", "--json", mp])
    return json.loads(out)["fuse"].get("ring_requests", 0)


def seq_mounts(kind, imgs, digest):
    """The seq table's rows for one kind of image (those SEQ_TOOLS selects)."""
    s = imgs[f"sealfs-{kind}"]
    d = ["--digest", digest] if digest else []
    mounts = [
        Mount("sealfs mount (verified)", [SEALFS, "mount", *d], s),
        Mount("sealfs mount --verify=none", [SEALFS, "mount", "--verify=none"], s),
        Mount("sealfs mount (verified) --read-ahead 128K", [SEALFS, "mount", "--read-ahead", "128K", *d], s),
        Mount("erofsfuse 1.9 (mkfs.erofs 1.9 image)", [EROFSFUSE], imgs[f"mkfs-{kind}"]),
        Mount("erofsfuse 1.9, read_ahead_kb 1024 by hand", [EROFSFUSE], imgs[f"mkfs-{kind}"], ra_kb=1024),
        Mount("erofsfuse 1.9 (the sealfs image)", [EROFSFUSE], s),
        Mount("squashfuse_ll 0.6", [SQUASHFUSE], imgs[f"sqfs-{kind}"]),
        Mount("squashfuse_ll 0.6, read_ahead_kb 1024 by hand", [SQUASHFUSE], imgs[f"sqfs-{kind}"], ra_kb=1024),
    ]
    if SEQ_TOOLS:
        mounts += [
            Mount("kernel EROFS (the sealfs image, file-backed: mount(2) of the file)", ["kernel"], s),
            Mount("kernel EROFS (the sealfs image, loop device), read_ahead_kb 1024", ["kernel-loop"], s, ra_kb=1024),
        ]
        if BEFORE:
            mounts.insert(1, Mount("sealfs mount (verified), BEFORE", [BEFORE, "mount", *d], s))
    return [m for m in mounts if selected(m.name) or (BEFORE and m.argv[0] == BEFORE)]


def report_subset(rows):
    """The seq rows run, with each one's time over the erofsfuse and kernel rows at 1 MiB."""
    load = open("/proc/loadavg").read().split()[:3]
    print(f"median of {RUNS} rounds after a warm-up, tools interleaved; load average {' '.join(load)}")
    for kind in ("lz4hc", "plain"):
        mine = [r for r in rows if r[1] == kind]
        tools = list(dict.fromkeys(r[3] for r in mine))

        def med(tool, col=4):
            v = [r[col] for r in mine if r[3] == tool]
            return statistics.median(v), min(v), max(v)

        refs = [t for t in tools if not t.startswith("sealfs")]
        print(f"\n### {kind}\n")
        print("| tool | seconds (min–max) | daemon CPU s | " + " | ".join(f"speed / {t}" for t in refs) + " |")
        print("|---|---|---|" + "---|" * len(refs))
        for t in tools:
            m, lo, hi = med(t)
            cpu = med(t, 5)[0]
            print(f"| {t} | {m:.3f} ({lo:.3f}–{hi:.3f}) | {cpu:.2f} | "
                  + " | ".join(f"{med(r)[0] / m:.2f}×" for r in refs) + " |")


def report(rows, imgs):
    rows = [r[1:] for r in rows if r[0] == "seq"]

    def stats(kind, tool, col):
        v = [r[col] for r in rows if r[0] == kind and r[2] == tool]
        return statistics.median(v), min(v), max(v)

    load = open("/proc/loadavg").read().split()[:3]
    lines = [
        HEADING,
        "",
        f"`cat big > /dev/null` (linux.tar, 1,361,950,720 bytes) on a fresh mount, image in the page cache; "
        f"tools interleaved, median of {RUNS} rounds after a warm-up (min–max). Ratio: the peer's median time "
        "over this row's (above 1: faster than the peer); the peer rows are their defaults (the kernel's 128 KiB "
        "readahead for a FUSE mount). `sealfs mount` sets the mount's readahead to 1 MiB (`--read-ahead`, as "
        "root), so the kernel sends requests of 1 MiB instead of 256 KiB; the rows with `--read-ahead 128K` and "
        "with `read_ahead_kb` set by hand for a peer compare at equal readahead. Load average at the end: "
        + " ".join(load) + ".",
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
    write_section(HEADING, "\n".join(lines))


LS_HEADING = "## FUSE `ls -lR` against erofsfuse 1.9, squashfuse_ll 0.6 and the kernel (issue 17)"


def report_ls(rows, imgs):
    rows = [r for r in rows if r[0] == "ls"]
    tools = list(dict.fromkeys(r[3] for r in rows))

    def stats(tool, col):
        v = [r[col] for r in rows if r[3] == tool]
        return statistics.median(v), min(v), max(v)

    ef = stats("erofsfuse 1.9 (mkfs.erofs 1.9 image)", 4)[0]
    kern = stats("kernel EROFS (the sealfs image, file-backed)", 4)[0]
    load = open("/proc/loadavg").read().split()[:3]
    lines = [
        LS_HEADING,
        "",
        "`ls -lR` of the `linux` tree (linux-source-6.1, about 80,000 entries) on a fresh mount, image in the "
        f"page cache; tools interleaved, median of {RUNS} rounds after a warm-up (min–max). Ratios: this row's "
        "median time over erofsfuse's and over the kernel's (below 1: faster). Load average at the end: "
        + " ".join(load) + ". Images: sealfs uncompressed (sealed), mkfs.erofs 1.9 uncompressed, mksquashfs lz4hc. "
        "The tree has no extended attributes: `sealfs mount` (`--xattrs=auto`) finds that by reading every inode "
        "in the background after mounting, then answers the first `getxattr` ENOSYS and the kernel stops sending "
        "them (`ls -l` asks two per file, `security.selinux` and `system.posix_acl_access`: 171,860 round trips "
        "here); the `--xattrs=on` row answers every one, as the peers do.",
        "",
        "| tool | seconds | daemon CPU s | / erofsfuse 1.9 | / kernel |",
        "|---|---|---|---|---|",
    ]
    for t in tools:
        med, lo, hi = stats(t, 4)
        cpu = stats(t, 5)
        lines.append(f"| {t} | {med:.3f} ({lo:.3f}–{hi:.3f}) | {cpu[0]:.2f} | {med / ef:.2f}× | {med / kern:.2f}× |")
    write_section(LS_HEADING, "\n".join(lines) + "\n")


def write_section(heading, text):
    print(text)
    doc = os.path.join(REPO, "docs", "benchmarks.md")
    old = open(doc).read()
    if heading in old:
        start = old.index(heading)
        nxt = old.find("\n## ", start + len(heading))
        old = old[:start] + text + (old[nxt:] if nxt >= 0 else "\n")
    else:
        old = old.rstrip("\n") + "\n\n" + text
    open(doc, "w").write(old)


if __name__ == "__main__":
    main()
