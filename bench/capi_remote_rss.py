#!/usr/bin/env python3
"""Peak memory of a cold remote read through the C bindings, with and without the persistent cache
(issue 38, item 19): the `big` workload of bench/bindings_remote.py (one 200 MB file of an lz4hc
image, read whole in 1 MiB reads) by bench/capi_remote_read.c linked against libsealfs.

    bench/capi_remote_rss.py [REPS]    (after `cargo build --release -p sealfs-capi -p sealfs-cli`;
                                        WORK=/var/tmp/sealfs-bindings-remote, as bindings_remote.py)

nginx on loopback serves the image; bytes fetched are what its access log says it sent. Each run
is a fresh process with a fresh cache directory, its peak RSS from `wait4`; the three settings are
interleaved, REPS rounds (default 3), and the medians printed as a table for docs/benchmarks.md; the
runs go to bench/results/capi-remote-rss-<stamp>.csv.
"""
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PYTHON", sys.executable)  # bindings_remote.py wants one; unused here
import bindings_remote as b  # noqa: E402

SETTINGS = [("SEALFS_OPEN_NO_CACHE", 2), ("cache, fill off (the default)", 0), ("cache, SEALFS_OPEN_FILL_AUTO", 4)]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    lib = ROOT.parent / "target/release"
    tmp = Path(tempfile.mkdtemp())
    os.symlink(lib / "libsealfs.so", tmp / "libsealfs.so.0")
    exe = tmp / "read"
    subprocess.run(["cc", "-O2", f"-I{ROOT.parent}/crates/capi/include", str(ROOT / "capi_remote_read.c"),
                    f"-L{lib}", "-lsealfs", f"-Wl,-rpath,{tmp}", "-o", str(exe)], check=True)
    b.WWW.mkdir(parents=True, exist_ok=True)
    b.build_images()
    nginx, base, log = b.start_nginx()
    runs = []
    try:
        digest = subprocess.run([b.SEALFS, "digest", str(b.WWW / "big.img")], check=True, capture_output=True,
                                text=True).stdout.split()[0]
        for r in range(reps):
            for label, flags in SETTINGS:
                alias = f"capi-{r}-{flags}-big.img"
                os.link(b.WWW / "big.img", b.WWW / alias)
                cache = b.WORK / f"capi-cache-{r}-{flags}"
                t = time.monotonic()
                p = subprocess.Popen([str(exe), base + alias, digest, str(cache), str(flags), "/big"],
                                     stdout=subprocess.DEVNULL)
                _, status, usage = os.wait4(p.pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0, label
                runs.append([label, r, b.served(log, alias), usage.ru_maxrss * 1024, round(time.monotonic() - t, 2)])
                shutil.rmtree(cache, ignore_errors=True)
                os.unlink(b.WWW / alias)
    finally:
        nginx.terminate()
        nginx.wait()
        shutil.rmtree(tmp)
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    out = ROOT / "results" / f"capi-remote-rss-{stamp}.csv"
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["setting", "round", "bytes_fetched", "peak_rss_bytes", "seconds"])
        w.writerows(runs)
    print("| setting | bytes fetched (nginx) | peak RSS, median | seconds, median |")
    print("|---|---:|---:|---:|")
    for label, _ in SETTINGS:
        mine = [r for r in runs if r[0] == label]
        print(f"| {label} | {statistics.median(r[2] for r in mine) / 1e6:.1f} MB "
              f"| {statistics.median(r[3] for r in mine) / 2**20:.0f} MiB "
              f"| {statistics.median(r[4] for r in mine):.2f} |")
    print(f"\n({out.relative_to(ROOT.parent)})")


if __name__ == "__main__":
    main()
