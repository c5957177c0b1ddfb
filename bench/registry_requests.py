#!/usr/bin/env python3
"""Every HTTP request of one cold read from docker-registry and from nginx, over bench/registry.py's
emulated link: what the time of bench/registry.py is made of.

    bench/registry_requests.py [first|cat]...   (as root; needs tcpdump; SEALFS, CORPUS_DIR, TREE
                                                 as bench/registry.py; ROUNDS=2: the first is a warm-up)

For each way (`sealfs mount oci+http://...` of the registry, `sealfs mount http://...` of nginx),
cold (page cache dropped, empty cache directory, fresh mount): the mount, then `first` (one byte of
the fixed first file of bench/registry.py) or `cat` (its 200 files). tcpdump records the loopback
on both sides of the link: the client's side (the proxy's port) gives each request's time from the
start of the mount and its wait; the server's side (behind the proxy, no delay) gives the time the
server took to answer it. `first` prints every request before the byte arrived; `cat` prints counts.
"""
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import registry as bench  # noqa: E402
import remote  # noqa: E402
from remote import read_all, sh  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "2"))
HDR = re.compile(r"^(\d+\.\d+) IP 127\.0\.0\.1\.(\d+) > 127\.0\.0\.1\.(\d+): Flags \[([^\]]*)\]")


def requests(pcap, port, t0):
    """(start, end, method, path, range, status) of each request to `port`, paired with its answer."""
    out = subprocess.run(["tcpdump", "-r", pcap, "-tt", "-n", "-A"], capture_output=True, text=True).stdout
    pkts, cur = [], None
    for line in out.splitlines():
        m = HDR.match(line)
        if m:
            cur = [float(m[1]) - t0, int(m[2]), int(m[3]), []]
            pkts.append(cur)
        elif cur is not None:
            cur[3].append(line)
    waiting, done = {}, []
    for t, src, dst, text in pkts:
        body = "\n".join(text)
        for m in re.finditer(r"(GET|HEAD) (\S+) HTTP/1\.1", body):
            if dst == port:
                rng = re.search(r"[Rr]ange: bytes=(\S+)", body)
                path = re.sub(r"sha256:[0-9a-f]{64}", "sha256:...", m[2])
                waiting.setdefault(src, []).append((t, m[1], path, rng[1] if rng else "-"))
        for m in re.finditer(r"HTTP/1\.1 (\d+)", body):
            if src == port and waiting.get(dst):
                start, meth, path, rng = waiting[dst].pop(0)
                done.append((start, t, meth, path, rng, m[1]))
    return sorted(done)


def main():
    ops = sys.argv[1:] or ["first"]
    if os.geteuid() != 0:
        sys.exit("registry_requests.py: run as root (mounts, drop_caches, tc, tcpdump)")
    if os.environ.get("SEALFS_REMOTE_BENCH_NETNS") != "1":
        env = dict(os.environ, SEALFS_REMOTE_BENCH_NETNS="1")
        os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    sh(["ip", "link", "set", "lo", "up"])
    if not shutil.which("tcpdump"):
        sys.exit("registry_requests.py: tcpdump not found (apt-get install tcpdump)")
    src = os.path.join(remote.CORPUS, bench.TREE)
    work = tempfile.mkdtemp(prefix="sealfs-registry-requests-", dir=remote.CORPUS)
    _, digest, nginx, registry, link, reg_port = bench.serve(src, work)
    files = remote.regular_files(src)
    pick = random.Random(42).sample(files, min(200, len(files)))
    mp, cache = tempfile.mkdtemp(), tempfile.mkdtemp()
    ways = [("registry", f"oci+http://127.0.0.1:{reg_port}/bench/tree:v1", reg_port, registry.port),
            ("nginx", f"http://127.0.0.1:{link.port}/tree.sealfs", link.port, nginx.port)]
    try:
        for op in ops:
            for rnd in range(ROUNDS):
                for name, location, cport, sport in ways:
                    shutil.rmtree(cache)
                    os.makedirs(cache)
                    bench.cold_client([(registry.port, "/v2/"), (nginx.port, "/")])
                    pcap = os.path.join(work, "trace.pcap")
                    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "600", "-U", "-w", pcap,
                                             f"tcp port {cport} or tcp port {sport}"], stderr=subprocess.DEVNULL)
                    time.sleep(0.5)
                    t0 = time.time()
                    sh([remote.SEALFS, "mount", "--digest", digest, "--cache-dir", cache, location, mp])
                    t1 = time.time()
                    if op == "first":
                        with open(os.path.join(mp, pick[0]), "rb", buffering=0) as f:
                            f.read(1)
                    else:
                        for p in pick:
                            read_all(os.path.join(mp, p))
                    t2 = time.time()
                    sh([remote.SEALFS, "umount", mp])
                    time.sleep(0.3)
                    dump.terminate()
                    dump.wait()
                    if rnd == 0:
                        continue
                    client = [r for r in requests(pcap, cport, t0) if r[0] <= t2 - t0]
                    server = requests(pcap, sport, t0)
                    took = {(r[2], r[3], r[4]): r[1] - r[0] for r in server}
                    print(f"\n### {op}, {name}: mount {t1 - t0:.3f} s, then {t2 - t1:.3f} s; "
                          f"{len(client)} requests before the end")
                    if op == "first":
                        print("| start (ms) | wait (ms) | server (ms) | request | range | status |")
                        print("|---|---|---|---|---|---|")
                        for start, end, meth, path, rng, status in client:
                            srv = took.get((meth, path, rng))
                            srv = f"{srv * 1000:.1f}" if srv is not None else "?"
                            print(f"| {start * 1000:.1f} | {(end - start) * 1000:.1f} | {srv} | {meth} "
                                  f"{path} | {rng} | {status} |")
                    times = [r[1] - r[0] for r in server]
                    if times:
                        print(f"server time per request: median {statistics.median(times) * 1000:.2f} ms, "
                              f"mean {statistics.mean(times) * 1000:.2f} ms, {len(times)} requests in all "
                              f"(readahead included)")
    finally:
        link.stop()
        nginx.stop()
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
