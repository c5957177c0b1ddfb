#!/usr/bin/env python3
"""What the Python bindings cost, in memory and in bytes fetched, reading a remote image over HTTP
(issue 38, item 19).

    PYTHON=VENV/bin/python bench/bindings_remote.py    (SEALFS=target/release/sealfs,
                                                        WORK=/var/tmp/sealfs-bindings-remote)

PYTHON is an interpreter with the `sealfs` package installed (the wheel of this tree). nginx
serves the images on loopback; what was fetched is what nginx's access log says it sent (the body
bytes of every response), never sealfs's own counters. Every run is a fresh process with a fresh
cache directory (cold), its peak RSS from the kernel (`wait4`'s ru_maxrss).

  big    one 200 MB file (text-like data, lz4hc image), read whole in 1 MiB reads, cold:
         cache=False; the default cache with fill "off" (the bindings' default) and "auto"
  small  300 files of 10 KB chosen at random from an image of 1.3 GB (3,000 such files and
         1.27 GB of other data, uncompressed), read whole by a process that then exits, and by
         one that works on for 10 s before exiting: fill "off", "auto", "on"

Prints a table for docs/benchmarks.md and writes bench/results/bindings-remote-<stamp>.csv.
"""
import csv
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEALFS = os.environ.get("SEALFS", str(ROOT / "target/release/sealfs"))
PYTHON = os.environ["PYTHON"]
WORK = Path(os.environ.get("WORK", "/var/tmp/sealfs-bindings-remote"))
WWW = WORK / "www"


def build_images():
    rng = random.Random(19)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(4096)]
    big_tree = WORK / "big-tree"
    if not (WWW / "big.img").exists():
        big_tree.mkdir(parents=True, exist_ok=True)
        with open(big_tree / "big", "wb") as f:
            written = 0
            while written < 200_000_000:
                # Words at random: text that lz4hc halves, roughly.
                chunk = b" ".join(rng.choices(words, k=150_000))[: 1 << 20]
                f.write(chunk)
                written += len(chunk)
        subprocess.run([SEALFS, "build", "-z", "lz4hc", str(big_tree), str(WWW / "big.img")], check=True,
                       stdout=subprocess.DEVNULL)
    if not (WWW / "many.img").exists():
        tree = WORK / "many-tree"
        (tree / "small").mkdir(parents=True, exist_ok=True)
        for i in range(3000):
            (tree / "small" / f"{i:05}").write_bytes(os.urandom(10_000))
        with open(tree / "other", "wb") as f:
            for _ in range(1270):
                f.write(os.urandom(1 << 20))
        subprocess.run([SEALFS, "build", str(tree), str(WWW / "many.img")], check=True, stdout=subprocess.DEVNULL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx():
    w = WORK / "nginx"
    (w / "tmp").mkdir(parents=True, exist_ok=True)
    port = free_port()
    user = "user root;" if os.geteuid() == 0 else ""
    conf = f"""daemon off;
master_process off;
{user}
pid {w}/nginx.pid;
error_log {w}/error.log info;
events {{ worker_connections 256; }}
http {{
  log_format ranges '$request_method $uri $http_range $status $body_bytes_sent';
  access_log {w}/access.log ranges;
  client_body_temp_path {w}/tmp; proxy_temp_path {w}/tmp; fastcgi_temp_path {w}/tmp;
  uwsgi_temp_path {w}/tmp; scgi_temp_path {w}/tmp;
  server {{ listen 127.0.0.1:{port}; root {WWW}; }}
}}
"""
    (w / "nginx.conf").write_text(conf)
    (w / "access.log").write_text("")  # counts are per run
    p = subprocess.Popen(["nginx", "-c", str(w / "nginx.conf"), "-p", str(w)])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    return p, f"http://127.0.0.1:{port}/", w / "access.log"


def served(log: Path, name: str) -> int:
    total = 0
    for line in log.read_text().splitlines():
        f = line.split()
        if len(f) >= 2 and f[1] == "/" + name:
            total += int(f[-1])
    return total


def run(code: str):
    """Runs `code` in a fresh interpreter; returns (seconds, peak RSS in bytes)."""
    t = time.monotonic()
    p = subprocess.Popen([PYTHON, "-c", code])
    _, status, usage = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, code
    return time.monotonic() - t, usage.ru_maxrss * 1024


def main():
    WWW.mkdir(parents=True, exist_ok=True)
    build_images()
    nginx, base, log = start_nginx()
    rows = []
    try:
        digests = {n: subprocess.run([SEALFS, "digest", str(WWW / n)], check=True, capture_output=True,
                                     text=True).stdout.split()[0] for n in ["big.img", "many.img"]}
        sizes = {n: (WWW / n).stat().st_size for n in digests}
        k = 0

        def copy(name):
            nonlocal k
            k += 1
            alias = f"{k}-{name}"
            os.link(WWW / name, WWW / alias)
            return alias

        for label, args in [("cache=False", "cache=False"), ('fill="off"', 'fill="off"'),
                            ('fill="auto"', 'fill="auto"')]:
            alias = copy("big.img")
            cache = WORK / f"cache-{k}"
            code = textwrap.dedent(f"""
                import sealfs
                img = sealfs.open({base + alias!r}, digest={digests['big.img']!r}, cache_dir={str(cache)!r}, {args})
                with img.open("/big") as f:
                    while f.read(1 << 20):
                        pass
                """)
            secs, rss = run(code)
            time.sleep(0.3)
            rows.append(["big", label, "exit", sizes["big.img"], 200_000_000, served(log, alias), rss, round(secs, 2)])
            shutil.rmtree(cache, ignore_errors=True)
        pick = random.Random(38).sample(range(3000), 300)
        for fill in ["off", "auto", "on"]:
            for stay in [0, 10]:
                alias = copy("many.img")
                cache = WORK / f"cache-{k}"
                code = textwrap.dedent(f"""
                    import time, sealfs
                    img = sealfs.open({base + alias!r}, digest={digests['many.img']!r}, cache_dir={str(cache)!r}, fill={fill!r})
                    for i in {pick!r}:
                        assert len(img.read_bytes(f"/small/{{i:05}}")) == 10_000
                    time.sleep({stay})
                    """)
                secs, rss = run(code)
                time.sleep(0.3)
                rows.append(["small", f'fill="{fill}"', f"exit after {stay} s" if stay else "exit", sizes["many.img"],
                             300 * 10_000, served(log, alias), rss, round(secs, 2)])
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        nginx.send_signal(signal.SIGTERM)
        nginx.wait()
        for p in WWW.iterdir():
            if p.name[0].isdigit():
                p.unlink()
    head = ["workload", "setting", "process", "image bytes", "bytes read", "bytes fetched (nginx)", "peak RSS",
            "seconds"]
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    out = ROOT / "bench/results" / f"bindings-remote-{stamp}.csv"
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)
    print(f"| {' | '.join(head)} |")
    print("|" + "---|" * len(head))
    for r in rows:
        mb = lambda b: f"{b / 1e6:,.1f} MB"
        print(f"| {r[0]} | {r[1]} | {r[2]} | {mb(r[3])} | {mb(r[4])} | {mb(r[5])} | {r[6] / 2**20:,.0f} MiB | {r[7]} |")
    print(f"raw: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
