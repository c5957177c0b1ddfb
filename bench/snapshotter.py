#!/usr/bin/env python3
"""containerd snapshotters (issue 39): from `pull` to the first output of `ctr run`, and the disk
used afterwards, for containerd 2.x's `overlayfs`, `sealfs snapshotter` (a proxy plugin, with its
differ: layers sealed from their blobs), `sealfs-dir` (the same without the differ: containerd
extracts each layer into a directory, the commit seals it; what containerd 1.6 does), and
containerd 2.x's own `erofs` snapshotter (with its EROFS differ, mkfs.erofs 1.9).

    bench/snapshotter.py        (as root; RUNS=3, SEALFS=target/release/sealfs,
                                 CONTAINERD2=target/oracles/containerd-2.4.2/bin,
                                 EROFS_UTILS=target/oracles/erofs-utils-1.9/bin,
                                 TREES="/usr/share SRC=/usr/src/linux" the large layers, one
                                 layer per tree, SRC=DEST copied to DEST in the image,
                                 SNAPSHOTTERS="overlayfs sealfs erofs sealfs-dir",
                                 CONTAINERD_LOG_LEVEL=info, KEEP=1 keeps each containerd's
                                 directory and logs, READ_ALL=0 leaves out the cost of running)

The image: a busybox-static layer, then one layer per tree of TREES, made once by umoci into
bench/.snapshotter/ and pushed by skopeo to a Debian docker-registry on 127.0.0.1 (a new one per
run of the script). By default the trees are /usr/share and, where `bench/corpus.sh linux` made
it, the linux source tree (CORPUS_DIR/linux/linux-source-6.1, as /usr/src/linux).

Each measurement starts a new containerd 2.x (empty root: content store and snapshots) and a new
`sealfs snapshotter`, drops the page cache, then times `ctr image pull --plain-http --snapshotter
S` followed by `ctr run --rm --snapshotter S` of a shell that reads a few files (one from each
tree) and prints a line: the time from the pull's start to that line. Then the disk: `du -sx`
(bytes, apparent sizes not counted: blocks) of containerd's content store, and of the snapshots
(containerd's own snapshotter's directory; sealfs's root, whose FUSE layer mounts `-x` leaves
out). With READ_ALL (the default), the cost of running: the page cache dropped again, `ctr run`
of `find / -xdev -type f -exec cat {} + | wc -c`, every file of the root file system read (the
byte counts must agree). The snapshotters run interleaved (the order turns each round), median
(min-max) of RUNS.

Writes bench/results/snapshotter-<stamp>.csv and prints a Markdown table for docs/benchmarks.md.
"""
import csv
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RUNS = int(os.environ.get("RUNS", "3"))
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
CTD2 = os.environ.get("CONTAINERD2", os.path.join(REPO, "target/oracles/containerd-2.4.2/bin"))
EROFS_UTILS = os.environ.get("EROFS_UTILS", os.path.join(REPO, "target/oracles/erofs-utils-1.9/bin"))
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))
_LINUX = os.path.join(CORPUS, "linux/linux-source-6.1")
TREES = os.environ.get(
    "TREES", "/usr/share" + (f" {_LINUX}=/usr/src/linux" if os.path.isdir(_LINUX) else "")
).split()


def src_dest(tree):
    """(source directory, path in the image) of a TREES entry, `SRC=DEST` or `PATH`."""
    src, _, dest = tree.partition("=")
    return src, dest or src
SNAPSHOTTERS = os.environ.get("SNAPSHOTTERS", "overlayfs sealfs erofs sealfs-dir").split()


def ctr_snapshotter(variant):
    """The snapshotter `ctr` names for a variant (`sealfs-dir` is `sealfs` without the differ)."""
    return "sealfs" if variant.startswith("sealfs") else variant
WORK = os.path.join(HERE, ".snapshotter")
PLATFORM = "linux/amd64"
# containerd's log level; `debug` logs each layer's apply time ("diff applied", d=...). The log
# is deleted with the containerd's directory unless KEEP=1.
LOG_LEVEL = os.environ.get("CONTAINERD_LOG_LEVEL", "info")
# After the pull: the cost of running, a container reading every file of its root file system
# (`find / -xdev -type f -exec cat {} +`), page cache dropped first. READ_ALL=0 leaves it out.
READ_ALL = os.environ.get("READ_ALL", "1") == "1"
APPLETS = ["sh", "cat", "head", "echo", "find", "wc"]
KEEP = os.environ.get("KEEP") == "1"


def sh(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stdout}")
    return r.stdout


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(what, cond, timeout=30):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            raise RuntimeError(f"{what} did not happen in {timeout} s")
        time.sleep(0.05)


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def make_layout():
    """The umoci layout `WORK/layout:bench` (made once; delete WORK to make it again)."""
    layout = os.path.join(WORK, "layout")
    stamp = os.path.join(WORK, "layout.done")
    want = " ".join(TREES) + " applets:" + ",".join(APPLETS)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return layout
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    bundle = os.path.join(WORK, "bundle")
    sh(["umoci", "init", "--layout", layout])
    sh(["umoci", "new", "--image", f"{layout}:bench"])
    sh(["umoci", "unpack", "--image", f"{layout}:bench", bundle])
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, "bin"))
    shutil.copy("/bin/busybox", os.path.join(rootfs, "bin"))
    for t in APPLETS:
        os.symlink("busybox", os.path.join(rootfs, "bin", t))
    sh(["umoci", "repack", "--image", f"{layout}:bench", bundle])
    for tree in TREES:
        src, dest = src_dest(tree)
        shutil.rmtree(bundle)
        sh(["umoci", "unpack", "--image", f"{layout}:bench", bundle])
        dest = os.path.join(rootfs, dest.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        sh(["cp", "-a", src, dest])
        sh(["umoci", "repack", "--image", f"{layout}:bench", bundle])
    shutil.rmtree(bundle)
    sh(["umoci", "config", "--image", f"{layout}:bench", "--config.cmd", "/bin/sh"])
    with open(stamp, "w") as f:
        f.write(want)
    return layout


def a_file_of(tree):
    """A regular file under `tree` (the first found, sorted), read by the container."""
    for root, dirs, names in os.walk(tree):
        dirs.sort()
        for n in sorted(names):
            p = os.path.join(root, n)
            if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) > 0:
                return p
    raise RuntimeError(f"no file in {tree}")


class Registry:
    def __init__(self, work):
        self.port = free_port()
        os.makedirs(os.path.join(work, "storage"), exist_ok=True)
        conf = os.path.join(work, "registry.yml")
        with open(conf, "w") as f:
            f.write(
                f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
                f"{work}/storage\nhttp:\n  addr: 127.0.0.1:{self.port}\n  secret: bench\n"
            )
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", conf],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(work, "registry.log"), "w"),
        )

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_for("docker-registry", up)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Containerd:
    """containerd 2.x with `sealfs snapshotter` as its proxy plugin, in a new directory."""

    def __init__(self, snapshotter):
        self.dir = tempfile.mkdtemp(prefix="sealfs-bench-ctd-")
        d = self.dir
        unpack = ""
        for s in ["overlayfs", "sealfs", "erofs"]:
            differ = {"erofs": "erofs", "sealfs": "sealfs-diff" if snapshotter == "sealfs" else ""}
            differ = f'\n  differ = "{differ[s]}"' if differ.get(s) else ""
            unpack += (
                f"[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n"
                f'  platform = "{PLATFORM}"\n  snapshotter = "{s}"{differ}\n'
            )
        erofs = ""
        if snapshotter == "erofs":
            # As containerd's docs/snapshotters/erofs.md says: the EROFS differ first (layers
            # converted straight from their tar streams), the walking one for the rest.
            erofs = (
                "[plugins.'io.containerd.service.v1.diff-service']\n"
                '  default = ["erofs", "walking"]\n'
                "[plugins.'io.containerd.differ.v1.erofs']\n"
                '  mkfs_options = ["-T0", "--mkfs-time", "--sort=none"]\n'
            )
        if snapshotter == "sealfs":
            # docs/usage.md: the sealfs differ first, the walking one for the rest.
            erofs = (
                f'[proxy_plugins.sealfs-diff]\n  type = "diff"\n  address = "{d}/sealfs.sock"\n'
                "[plugins.'io.containerd.service.v1.diff-service']\n"
                '  default = ["sealfs-diff", "walking"]\n'
            )
        with open(os.path.join(d, "config.toml"), "w") as f:
            f.write(
                f'version = 3\nroot = "{d}/root"\nstate = "{d}/state"\n'
                f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                f'[grpc]\n  address = "{d}/containerd.sock"\n'
                f'[proxy_plugins.sealfs]\n  type = "snapshot"\n  address = "{d}/sealfs.sock"\n'
                f"[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n{unpack}{erofs}"
                f"[debug]\n  level = \"{LOG_LEVEL}\"\n"
            )
        self.snapshotter = subprocess.Popen(
            [SEALFS, "snapshotter", "--root", f"{d}/sealfs", "--address", f"{d}/sealfs.sock",
             "--containerd-address", f"{d}/containerd.sock"],
            stdout=subprocess.DEVNULL,
            stderr=open(f"{d}/snapshotter.log", "w"),
        )

        def listening():
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(f"{d}/sealfs.sock")
                s.close()
                return True
            except OSError:
                return False

        wait_for("sealfs snapshotter", listening)
        env = dict(os.environ, PATH=f"{CTD2}:{EROFS_UTILS}:{os.environ['PATH']}")
        self.containerd = subprocess.Popen(
            [f"{CTD2}/containerd", "--config", f"{d}/config.toml"],
            stdout=subprocess.DEVNULL,
            stderr=open(f"{d}/containerd.log", "w"),
            env=env,
        )
        wait_for(
            "containerd",
            lambda: subprocess.run(self.ctr("version"), capture_output=True).returncode == 0,
        )

    def ctr(self, *args):
        return [f"{CTD2}/ctr", "--address", f"{self.dir}/containerd.sock", *args]

    def du(self, path):
        """Bytes of disk blocks under `path`, mounts left out. containerd's garbage collection
        may still be removing the container's snapshot: du's complaint about a directory gone
        under it is not an error (its total is of what was left)."""
        if not os.path.exists(path):
            return 0
        r = subprocess.run(["du", "-sx", "--block-size=1", path], capture_output=True, text=True)
        total = r.stdout.split()
        if not total or not total[0].isdigit():
            raise RuntimeError(f"du {path}: exit {r.returncode}: {r.stdout}{r.stderr}")
        return int(total[0])

    def stop(self):
        self.containerd.terminate()
        self.containerd.wait()
        self.snapshotter.terminate()
        self.snapshotter.wait()
        mounts = [l.split()[1] for l in open("/proc/mounts") if l.split()[1].startswith(self.dir)]
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", m])
        if KEEP:
            print(f"kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def measure(variant, reference, script):
    c = Containerd(variant)
    snapshotter = ctr_snapshotter(variant)
    try:
        drop_caches()
        t0 = time.monotonic()
        sh(c.ctr("image", "pull", "--plain-http", "--snapshotter", snapshotter, reference))
        pulled = time.monotonic() - t0
        run = subprocess.Popen(
            c.ctr("run", "--rm", "--snapshotter", snapshotter, reference, "bench",
                  "/bin/sh", "-c", script),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = run.stdout.readline()
        t = time.monotonic() - t0
        out, err = run.communicate()
        if run.returncode != 0 or not first.startswith("first"):
            raise RuntimeError(f"ctr run on {snapshotter}: {first}{out}{err}")
        root = f"{c.dir}/root"
        content = c.du(f"{root}/io.containerd.content.v1.content")
        if snapshotter == "sealfs":
            snaps_dir = f"{c.dir}/sealfs"
        else:
            snaps_dir = f"{root}/io.containerd.snapshotter.v1.{snapshotter}"
        snaps = c.du(snaps_dir)
        # The layers are what the snapshotter says they are: sealed images (sealfs), EROFS
        # blobs made by the EROFS differ (erofs), directories (overlayfs).
        suffix = {"sealfs": ".sealfs", "erofs": ".erofs"}.get(snapshotter)
        if suffix:
            images = sh(["find", snaps_dir, "-xdev", "-type", "f", "-name", f"*{suffix}"]).split()
            if not images:
                raise RuntimeError(f"{snapshotter}: no *{suffix} layer under {snaps_dir}")
        if variant == "sealfs":
            # Every layer sealed by the differ, none from a directory.
            log = open(f"{c.dir}/snapshotter.log").read()
            if log.count(" as a sealed layer: ") != 1 + len(TREES):
                raise RuntimeError(f"sealfs: not every layer went through the differ:\n{log}")
        m = {"time": t, "pull": pulled, "content": content, "snapshots": snaps}
        if READ_ALL:
            drop_caches()
            t1 = time.monotonic()
            out = sh(c.ctr("run", "--rm", "--snapshotter", snapshotter, reference, "bench-all",
                           "/bin/sh", "-c", "find / -xdev -type f -exec cat {} + | wc -c"))
            m["read_all"] = time.monotonic() - t1
            m["read_bytes"] = int(out.split()[-1])
        return m
    finally:
        c.stop()


def fmt(values, unit=""):
    med = statistics.median(values)
    return f"{med:.2f}{unit} ({min(values):.2f}–{max(values):.2f})"


def main():
    if os.geteuid() != 0:
        sys.exit("bench/snapshotter.py: run as root (containerd, mounts, drop_caches)")
    for p in [SEALFS, f"{CTD2}/containerd", f"{EROFS_UTILS}/mkfs.erofs"]:
        if not os.path.exists(p):
            sys.exit(f"bench/snapshotter.py: {p} missing (cargo build --release; scripts/build-oracles.sh)")
    layout = make_layout()
    regwork = tempfile.mkdtemp(prefix="sealfs-bench-reg-")
    registry = Registry(regwork)
    try:
        reference = f"127.0.0.1:{registry.port}/bench/img:1"
        sh(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:bench",
            f"docker://{reference}"])
        files = []
        for t in TREES:
            src, dest = src_dest(t)
            files.append(os.path.join(dest, os.path.relpath(a_file_of(src), src)))
        script = " ".join(f"head -c 4096 '{f}' >/dev/null;" for f in files) + " echo first"
        results = {s: [] for s in SNAPSHOTTERS}
        for r in range(RUNS):
            order = SNAPSHOTTERS[r % len(SNAPSHOTTERS):] + SNAPSHOTTERS[: r % len(SNAPSHOTTERS)]
            for s in order:
                m = measure(s, reference, script)
                results[s].append(m)
                print(f"round {r + 1} {s}: {m}", file=sys.stderr, flush=True)
    finally:
        registry.stop()
        shutil.rmtree(regwork, ignore_errors=True)

    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", f"snapshotter-{stamp}.csv")
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["snapshotter", "round", "seconds_to_first_output", "seconds_pull",
                    "content_bytes", "snapshot_bytes", "seconds_read_all", "bytes_read_all"])
        for s, ms in results.items():
            for i, m in enumerate(ms):
                w.writerow([s, i + 1, f"{m['time']:.3f}", f"{m['pull']:.3f}", m["content"],
                            m["snapshots"], f"{m.get('read_all', 0):.3f}", m.get("read_bytes", "")])
    if READ_ALL:
        read = {m["read_bytes"] for ms in results.values() for m in ms}
        if len(read) != 1:
            raise RuntimeError(f"the containers read different byte counts: {read}")
    base = results.get("overlayfs")
    print(f"| snapshotter | pull to first output, s | of which pull, s | snapshots, MB | content store, MB | time / overlayfs | snapshots / overlayfs |")
    print("|---|---|---|---|---|---|---|")
    for s, ms in results.items():
        t = [m["time"] for m in ms]
        p = [m["pull"] for m in ms]
        sn = [m["snapshots"] / 1e6 for m in ms]
        ct = [m["content"] / 1e6 for m in ms]
        if base:
            rt = statistics.median(t) / statistics.median([m["time"] for m in base])
            rs = statistics.median(sn) / statistics.median([m["snapshots"] / 1e6 for m in base])
            ratios = f"{rt:.2f}× | {rs:.2f}×"
        else:
            ratios = "– | –"
        print(f"| {s} | {fmt(t)} | {fmt(p)} | {fmt(sn)} | {fmt(ct)} | {ratios} |")
    if READ_ALL:
        print(f"\nReading every file ({read.pop():,} bytes), page cache dropped:\n")
        print("| snapshotter | seconds | / overlayfs |")
        print("|---|---|---|")
        for s, ms in results.items():
            r = [m["read_all"] for m in ms]
            rel = (f"{statistics.median(r) / statistics.median([m['read_all'] for m in base]):.2f}×"
                   if base else "–")
            print(f"| {s} | {fmt(r)} | {rel} |")
    print(f"\n(raw rows: {os.path.relpath(out, REPO)})")


if __name__ == "__main__":
    main()
