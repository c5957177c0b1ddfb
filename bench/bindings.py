#!/usr/bin/env python3
"""The Python bindings against Python reading the same files through a mount (issue 31).

    bench/bindings.py [TABLE...]    (RUNS=5, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus,
                                     BINDINGS_WORK=CORPUS_DIR/bindings: images, venv, Parquet file)

TABLE is any of files, pool, parquet (default: all). Each is one run with the ways interleaved
(A B C A B C ...) after an untimed warm-up round; medians of RUNS with min and max. Needs root
(mounts).

  files    every regular file of the `linux` tree read whole, one thread:
             sealfs.py   `img.open(path).read()` through the bindings (image opened with its digest:
                         every block verified)
             kernel      `open(MNT/path, "rb").read()` on the kernel's EROFS mount of the same image
                         file (file-backed: mount(2) of the file, bench/kmount.py; verifies nothing)
             fuse        the same on `sealfs mount` of the image (verified)
  pool     the same with a pool of 8 threads (concurrent.futures), the image shared by all
  parquet  `pyarrow.parquet.read_table` of a 1 GB Parquet file (generated once with pyarrow:
           random int64, float64 and string columns) inside an image: through fsspec
           (`sealfs://`, verified), from the kernel mount, from `sealfs mount`; and, as the floor,
           `plain`: the same file read from the directory the image was built from (page cache)

States (STATES=warm-image,warm; say which one every number is):
  warm-image  the image file is in the page cache (read before every run); every run is a fresh
              process opening the image, or reading a fresh mount (kernel and FUSE mounted for the
              run and unmounted after), so no run finds file pages another run read. (The kernel's
              file-backed EROFS mount reads its backing file with direct I/O, so it does not use
              the image file's page cache.)
  warm        the mounts stay mounted through the table and have read everything once (the
              warm-up), so their reads come from the page cache; sealfs.py is a fresh process each
              run (its caches live in the process) over the image file in the page cache.

Targets (docs/benchmarks.md, shared/benchmarks.md): sealfs.py >= 1.5x the FUSE mount and within
1.3x of the kernel mount, verification on.

The bindings come from a virtual environment made once under CORPUS_DIR (maturin builds the
wheel; pyarrow and fsspec from PyPI); PYTHON=... uses another interpreter that has them.
Writes bench/results/bindings-<stamp>.csv and prints a table for docs/benchmarks.md.
"""
import csv
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
WORK = os.environ.get("BINDINGS_WORK", os.path.join(CORPUS, "bindings"))
LINUX = os.path.join(CORPUS, "linux", "linux-source-6.1")
PARQUET_BYTES = int(os.environ.get("PARQUET_BYTES", str(1 << 30)))
STATES = os.environ.get("STATES", "warm-image,warm").split(",")
ROWS = []  # (table, round, way, seconds)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw).stdout


def python():
    """An interpreter with sealfs, pyarrow and fsspec: $PYTHON, or a venv made once here."""
    if os.environ.get("PYTHON"):
        return os.environ["PYTHON"]
    venv = os.path.join(WORK, "venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(os.path.join(WORK, "venv.ok")):
        shutil.rmtree(venv, ignore_errors=True)
        sh([sys.executable, "-m", "venv", venv])
        sh([py, "-m", "pip", "install", "-q", "maturin>=1.9.4,<2", "pyarrow", "fsspec", "numpy"])
        wheels = os.path.join(WORK, "wheels")
        shutil.rmtree(wheels, ignore_errors=True)
        sh([os.path.join(venv, "bin", "maturin"), "build", "--release", "-q", "-m",
            os.path.join(REPO, "crates/python/Cargo.toml"), "-i", py, "-o", wheels])
        wheel = [w for w in os.listdir(wheels) if w.endswith(".whl")][0]
        sh([py, "-m", "pip", "install", "-q", "--force-reinstall", os.path.join(wheels, wheel)])
        open(os.path.join(WORK, "venv.ok"), "w").close()
    return py


def build(src, image, *args):
    """Builds `image` from `src` once; returns its digest."""
    digest_file = image + ".digest"
    if not os.path.exists(digest_file):
        out = sh([SEALFS, "build", "-q", *args, src, image])
        with open(digest_file, "w") as f:
            f.write(out.strip().splitlines()[-1])
    return open(digest_file).read().strip()


def make_parquet(py, path):
    """A Parquet file of about PARQUET_BYTES, written by pyarrow (once)."""
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    code = f"""
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
rng = np.random.default_rng(31)
rows = 2_000_000
w = None
total = 0
while total < {PARQUET_BYTES}:
    t = pa.table({{"a": rng.integers(0, 1 << 62, rows), "b": rng.normal(size=rows),
                  "c": pa.array([f"row-{{i}}-{{x:.6f}}" for i, x in enumerate(rng.random(rows))])}})
    if w is None:
        w = pq.ParquetWriter("{path}.tmp", t.schema, compression="none")
    w.write_table(t, row_group_size=500_000)
    total += t.nbytes
w.close()
"""
    sh([py, "-c", code])
    os.rename(path + ".tmp", path)


# What each way runs, in a fresh interpreter: prints the seconds the reads took.
FILES = r"""
import os, sys, time
from concurrent.futures import ThreadPoolExecutor
way, root, listing, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
paths = open(listing).read().split("\0")[:-1]
if way == "sealfs.py":
    import sealfs
    img = sealfs.open(root, digest=sys.argv[5], cache=False)
    def read(p):
        with img.open(p) as f:
            return len(f.read())
else:
    def read(p):
        with open(root + p, "rb") as f:
            return len(f.read())
t = time.perf_counter()
if threads == 1:
    n = sum(map(read, paths))
else:
    with ThreadPoolExecutor(threads) as pool:
        n = sum(pool.map(read, paths, chunksize=64))
print(time.perf_counter() - t, n)
"""

PARQUET = r"""
import sys, time
import pyarrow.parquet as pq
way, root, inner = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter()
if way == "sealfs.py":
    import fsspec
    fs = fsspec.filesystem("sealfs", image=root, digest=sys.argv[4], cache=False)
    table = pq.read_table(inner.lstrip("/"), filesystem=fs)
else:
    table = pq.read_table(root + inner)
print(time.perf_counter() - t, table.num_rows, flush=True)
# pyarrow's threads that read through a Python file system may abort the interpreter at exit
# (apache/arrow#34314); the measurement is printed, so leave at once.
import os
os._exit(0)
"""


class Mount:
    def __init__(self, kind, image):
        self.kind, self.image = kind, image
        self.mp = tempfile.mkdtemp(prefix="sealfs-bench-py-")

    def __enter__(self):
        if self.kind == "kernel":
            kmount.mount_file(self.image, self.mp)
        else:
            sh([SEALFS, "mount", self.image, self.mp])
        deadline = time.time() + 10
        while not os.path.ismount(self.mp):
            if time.time() > deadline:
                raise RuntimeError(f"{self.kind}: not mounted")
            time.sleep(0.02)
        return self.mp

    def __exit__(self, *exc):
        if self.kind == "kernel":
            sh(["umount", self.mp])
        else:
            sh([SEALFS, "umount", self.mp])
        deadline = time.time() + 10
        while os.path.ismount(self.mp) and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        os.rmdir(self.mp)


def one(py, way, image, digest, script, args, mounted):
    """One timed run of `script` for `way`; returns seconds. `mounted`: the way's mount point when
    it stays mounted (state warm), else None; for `plain`, the directory the image was built from."""
    subprocess.run(["cat", image], stdout=subprocess.DEVNULL, check=True)
    if way == "plain":
        out = sh([py, "-c", script, way, mounted, *args])
    elif way == "sealfs.py":
        out = sh([py, "-c", script, way, image, *args, digest])
    elif mounted is not None:
        out = sh([py, "-c", script, way, mounted, *args])
    else:
        with Mount("kernel" if way == "kernel" else "fuse", image) as mp:
            out = sh([py, "-c", script, way, mp, *args])
    return float(out.split()[0])


def table(name, py, image, digest, script, args, plain=None):
    """Runs the ways interleaved; `plain`: the source directory, for a `plain` way (the floor)."""
    ways = ["sealfs.py", "kernel", "fuse"] + (["plain"] if plain else [])
    for state in STATES:
        mounts = {"plain": (None, plain)} if plain else {}
        if state == "warm":
            for w in ways[1:]:
                m = Mount("kernel" if w == "kernel" else "fuse", image)
                mounts[w] = (m, m.__enter__())
        try:
            for w in ways:  # warm-up, untimed
                one(py, w, image, digest, script, args, mounts.get(w, (None, None))[1])
            for r in range(RUNS):
                for w in ways:
                    s = one(py, w, image, digest, script, args, mounts.get(w, (None, None))[1])
                    ROWS.append((f"{name} ({state})", r, w, s))
                    print(f"{name} {state} round {r} {w}: {s:.3f} s", flush=True)
        finally:
            for m, _ in mounts.values():
                if m is not None:
                    m.__exit__(None, None, None)


def report():
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", f"bindings-{stamp}.csv")
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["table", "round", "way", "seconds"])
        w.writerows(ROWS)
    print(f"\n{out}\n")
    print(f"{os.cpu_count()} cores, {os.uname().release}, RUNS={RUNS}\n")
    print("| table | sealfs.py (s) | kernel mount (s) | sealfs mount (s) | sealfs.py speed vs FUSE | time vs kernel |")
    print("|---|---|---|---|---|---|")
    for t in sorted({r[0] for r in ROWS}):
        med = {}
        cell = {}
        for way in ("sealfs.py", "kernel", "fuse"):
            v = [r[3] for r in ROWS if r[0] == t and r[2] == way]
            med[way] = statistics.median(v)
            cell[way] = f"{med[way]:.2f} ({min(v):.2f}-{max(v):.2f})"
        print(f"| {t} | {cell['sealfs.py']} | {cell['kernel']} | {cell['fuse']} | "
              f"{med['fuse'] / med['sealfs.py']:.2f}x | {med['sealfs.py'] / med['kernel']:.2f}x |")
    for t in sorted({r[0] for r in ROWS if r[2] == "plain"}):
        v = [r[3] for r in ROWS if r[0] == t and r[2] == "plain"]
        print(f"\n{t}, plain file (the floor): {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) s")


def main():
    tables = sys.argv[1:] or ["files", "pool", "parquet"]
    if os.geteuid() != 0:
        sys.exit("bench/bindings.py: needs root (kernel and FUSE mounts)")
    os.makedirs(WORK, exist_ok=True)
    py = python()
    if {"files", "pool"} & set(tables):
        if not os.path.isdir(LINUX):
            sys.exit(f"{LINUX}: missing (bench/corpus.sh linux)")
        image = os.path.join(WORK, "linux.img")
        digest = build(LINUX, image)
        listing = os.path.join(WORK, "linux.files")
        if not os.path.exists(listing):
            paths = []
            for d, _, names in os.walk(LINUX):
                for n in names:
                    p = os.path.join(d, n)
                    if os.path.isfile(p) and not os.path.islink(p):
                        paths.append(p[len(LINUX):])
            paths.sort()
            with open(listing, "w") as f:
                f.write("".join(p + "\0" for p in paths))
        if "files" in tables:
            table("files", py, image, digest, FILES, [listing, "1"])
        if "pool" in tables:
            table("pool", py, image, digest, FILES, [listing, "8"])
    if "parquet" in tables:
        src = os.path.join(WORK, "parquet-src")
        make_parquet(py, os.path.join(src, "data", "big.parquet"))
        image = os.path.join(WORK, "parquet.img")
        digest = build(src, image)
        table("parquet", py, image, digest, PARQUET, ["/data/big.parquet"], plain=src)
    report()


if __name__ == "__main__":
    main()
