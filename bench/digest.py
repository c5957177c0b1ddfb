#!/usr/bin/env python3
"""Digest/verify benchmark: a ~1.4 GB sealed image (the `big` corpus, one file), warm page cache.

    bench/digest.py            (RUNS=5, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus)

Interleaves, after one untimed warm-up round, RUNS timed rounds of:
    sealfs digest IMG            the image digest, recomputed from the bytes
    sealfs verify --digest D IMG every block and the tree checked, plus the per-file digests
    fsverity digest PLAIN        the same digest by fsverity-utils, over the EROFS bytes alone
    sha256sum PLAIN              plain SHA-256 of the same bytes
and prints the SHA-256 limit of the machine: `openssl speed -evp sha256 -bytes 4096` per core x cores.
Writes bench/results/digest-<stamp>.csv, the section of docs/benchmarks.md and docs/bench-digest.png.
"""
import csv
import os
import re
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
HEADING = "## Digest and verify: 1.4 GB image, warm cache"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def openssl_per_core():
    cmd = ["openssl", "speed", "-evp", "sha256", "-bytes", "4096", "-seconds", "3"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("sha256")][-1]
    return float(line.split()[-1].rstrip("k")) * 1000  # bytes/s


def main():
    big = os.path.join(CORPUS, "big")
    if not os.path.exists(os.path.join(big, "linux.tar")):
        subprocess.run(["bash", os.path.join(HERE, "corpus.sh"), "big"], check=True)
    work = tempfile.mkdtemp(prefix="sealfs-digest-", dir=CORPUS)
    img, plain = os.path.join(work, "sealed.img"), os.path.join(work, "plain.img")
    digest = sh([SEALFS, "build", "-q", "-T", "0", big, img]).strip()
    sh([SEALFS, "build", "-q", "--no-seal", "-T", "0", big, plain])
    size = os.path.getsize(plain)
    for f in (img, plain):
        subprocess.run(["cat", f], stdout=subprocess.DEVNULL, check=True)
    fsv = sh(["fsverity", "digest", plain]).split()[0]
    assert fsv == digest, f"fsverity digest {fsv} != sealfs {digest}"
    tools = {
        "sealfs digest": [SEALFS, "digest", img],
        "sealfs verify": [SEALFS, "verify", "--digest", digest, img],
        "fsverity digest": ["fsverity", "digest", plain],
        "sha256sum": ["sha256sum", plain],
    }
    rows = []
    for rnd in range(RUNS + 1):
        for name, cmd in tools.items():
            t = timed(cmd)
            if rnd > 0:
                rows.append((rnd, name, t))
        print(f"[digest] round {rnd}/{RUNS}", file=sys.stderr)
    per_core = openssl_per_core()
    cores = os.cpu_count()
    limit = per_core * cores
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    csv_path = os.path.join(HERE, "results", f"digest-{stamp}.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "tool", "seconds", "bytes"])
        for r in rows:
            w.writerow([*r, size])
    st = {}
    for name in tools:
        ts = [t for _, n, t in rows if n == name]
        st[name] = (statistics.median(ts), min(ts), max(ts))
    gbs = lambda s: size / s / 1e9  # noqa: E731
    cpu = sh(["grep", "-m1", "model name", "/proc/cpuinfo"]).split(":", 1)[1].strip()
    versions = {
        "fsverity": sh(["dpkg-query", "-W", "-f", "${Version}", "fsverity"]),
        "coreutils": sh(["dpkg-query", "-W", "-f", "${Version}", "coreutils"]),
        "sealfs": sh([SEALFS, "--version"]).strip(),
    }
    out = [HEADING, "",
           f"Measured {time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())} with `bench/digest.py`; raw runs in `bench/results/{os.path.basename(csv_path)}`.", "",
           f"- Machine: nproc {cores}, {cpu}, kernel {os.uname().release}",
           f"- Image: the `big` corpus (one 1.36 GB file, the linux-source-6.1 tar) built with `sealfs build -T 0`: {size:,} EROFS bytes; `fsverity digest` of them equals the seal's digest ({digest[:23]}…)",
           f"- Method: page cache warm (both files read once), one untimed round, then {RUNS} rounds, tools interleaved; wall time of the whole command.",
           f"- Versions: {versions['sealfs']}, fsverity-utils {versions['fsverity']}, coreutils {versions['coreutils']}",
           f"- SHA-256 limit of the machine: `openssl speed -evp sha256 -bytes 4096` = {per_core/1e9:.2f} GB/s per core × {cores} cores = **{limit/1e9:.2f} GB/s**", "",
           "| command | median (s) | min (s) | max (s) | throughput (GB/s, median) | share of the SHA-256 limit |",
           "|---|---:|---:|---:|---:|---:|"]
    for name in tools:
        m, lo, hi = st[name]
        out.append(f"| `{' '.join(os.path.basename(c) if c.startswith('/') else c for c in tools[name][:2])}` | {m:.2f} | {lo:.2f} | {hi:.2f} | {gbs(m):.2f} | {size / m / limit:.0%} |")
    r_fsv = st["fsverity digest"][0] / st["sealfs digest"][0]
    r_ver = st["fsverity digest"][0] / st["sealfs verify"][0]
    share = size / st["sealfs digest"][0] / limit
    out += ["",
            "| target | figure | met? |", "|---|---:|---|",
            f"| `sealfs digest` ≥ 2× `fsverity digest` | {r_fsv:.2f}× | {'met' if r_fsv >= 2 else '**not met**'} |",
            f"| `sealfs verify` vs `fsverity digest` (context: verify also reads the tree and checks per-file digests) | {r_ver:.2f}× | – |",
            f"| `sealfs digest` ≥ 80% of the SHA-256 limit | {share:.0%} | {'met' if share >= 0.8 else '**not met**'} |",
            "", "![Digest benchmark](bench-digest.png)", ""]
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
        fig, ax = plt.subplots(figsize=(8, 4))
        thr = [gbs(st[n][0]) for n in names]
        ax.bar(names, thr, color=["#2b7bba", "#6baed6", "#e08214", "#7f7f7f"])
        ax.axhline(limit / 1e9, color="red", linestyle="--", label=f"SHA-256 limit ({limit/1e9:.2f} GB/s)")
        ax.axhline(0.8 * limit / 1e9, color="red", linestyle=":", label="80% of the limit")
        for i, v in enumerate(thr):
            ax.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom")
        ax.set_ylabel("GB/s (median)")
        ax.set_title(f"Digest of a {size/1e9:.2f} GB image, warm ({RUNS} runs)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(REPO, "docs", "bench-digest.png"), dpi=100)
    except ImportError:
        print("matplotlib missing: no chart", file=sys.stderr)
    subprocess.run(["rm", "-rf", work])
    print(text)


if __name__ == "__main__":
    main()
