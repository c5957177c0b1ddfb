#!/usr/bin/env python3
"""Remote images over an emulated wide-area link: `sealfs mount URL` against what a user would do
today (rclone mounting the HTTP directory, the kernel mounting the image file through it,
unverified), and against sealfs fetching hash blocks only after the data (dependent requests).

    bench/remote.py [TABLE...]     (as root; RUNS=3, SEALFS=target/release/sealfs, CORPUS_DIR=bench/.corpus,
                                    SEALFS_MOUNT_ARGS="--cluster-cache 1073741824" to add mount options)

TABLE is any of seq, cat, ls (default: all):
  seq   cold sequential read of `big` (linux.tar, 1.36 GB, lz4hc 64 KiB clusters) through the mount;
        reported as MB/s used (decompressed) and as the link's use: bytes fetched per second, and
        their share of the link rate;
  cat   cold `cat` of 2,000 random files (fixed seed) of the `linux` tree image (uncompressed);
        sealfs by default (`--fill=auto`), with `--fill=on` and with `--fill=off` (the lazy path);
  catz  the same files from a compressed image of the tree (`--preset small`: zstd 12 in 1 MiB
        clusters, fragments, compressed metadata and directories; CATZ_ARGS to change it);
  ls    cold `ls -lR` of the `linux` tree image.

The link: the script runs itself in a network namespace of its own (`unshare -n`), where nginx
serves the images on 127.0.0.1 and every client (sealfs, rclone) talks to it over that namespace's
loopback. The issue asks for `tc qdisc ... netem delay 10ms rate 1gbit` there; this machine's
kernel has no sch_netem (CONFIG_NET_SCH_NETEM is not set), so the two halves are made apart:
  - delay: toxiproxy (Go, built once into target/oracles) in front of nginx adds 10 ms each way
    (20 ms round trip) to every chunk of data, which a request/response protocol sees as
    round-trip time;
  - rate: an HTB class of 1 Gbit/s on the namespace's loopback takes everything toxiproxy sends
    to the clients (a u32 filter on its port); every connection shares it, as on one real link.
    (toxiproxy's own bandwidth toxic limits each connection apart, which lets a client that opens
    many connections go past the link rate; the first measurements used it.)

Cold means: the page cache dropped, a fresh mount, and an empty sealfs cache directory (sealfs)
or an empty rclone VFS cache (rclone). Tools run interleaved, one untimed warm-up round first,
median (min-max) of RUNS. Bytes fetched come from nginx's access log ($body_bytes_sent).

Writes bench/results/remote-<stamp>.csv and prints a Markdown table for docs/benchmarks.md.
"""
import csv
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kmount  # noqa: E402  (file-backed kernel mounts)
REPO = os.path.dirname(HERE)
RUNS = int(os.environ.get("RUNS", "3"))
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))
TOXIPROXY = os.environ.get("TOXIPROXY", os.path.join(REPO, "target/oracles/toxiproxy-server"))
MOUNT_ARGS = os.environ.get("SEALFS_MOUNT_ARGS", "").split()  # more `sealfs mount` options
LINK_MBPS = 125.0  # 1 Gbit/s
ROWS = []


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


def regular_files(src):
    """The regular files under `src` (symbolic links left out), relative to it, sorted."""
    files = []
    for root, _, names in os.walk(src):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files.append(os.path.relpath(p, src))
    return sorted(files)


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Nginx:
    def __init__(self, root, work):
        self.port = free_port()
        self.log = os.path.join(work, "access.log")
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off; user root; worker_processes 2; pid {work}/nginx.pid; error_log {work}/error.log;
events {{ worker_connections 1024; }}
http {{
  log_format bytes '$request_method $status $body_bytes_sent'; access_log {self.log} bytes;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy; fastcgi_temp_path {work}/fcgi;
  uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  sendfile on; tcp_nopush on; keepalive_requests 100000;
  server {{ listen 127.0.0.1:{self.port}; root {root}; autoindex on; }}
}}
""")
        self.proc = subprocess.Popen(["nginx", "-c", conf, "-e", f"{work}/error.log"], stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def bytes_sent(self):
        total = 0
        try:
            for line in open(self.log):
                parts = line.split()
                if len(parts) == 3 and parts[2].isdigit():
                    total += int(parts[2])
        except OSError:
            pass
        return total

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Link:
    """toxiproxy in front of nginx: 10 ms each way; 1 Gbit/s downstream, shared (HTB on lo)."""

    def __init__(self, upstream):
        self.api = free_port()
        self.port = free_port()
        self.proc = subprocess.Popen([TOXIPROXY, "-host", "127.0.0.1", "-port", str(self.api)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.api)
        self.post("/proxies", {"name": "wan", "listen": f"127.0.0.1:{self.port}",
                               "upstream": f"127.0.0.1:{upstream}", "enabled": True})
        for stream in ("downstream", "upstream"):
            self.post("/proxies/wan/toxics", {"name": f"latency_{stream}", "type": "latency",
                                              "stream": stream, "attributes": {"latency": 10, "jitter": 0}})
        # One shaped class for what the proxy sends to clients; everything else on lo unshaped.
        rate = f"{int(LINK_MBPS * 8)}mbit"
        sh(["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "20"])
        sh(["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", rate,
            "ceil", rate, "quantum", "60000"])
        sh(["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "40gbit",
            "quantum", "60000"])
        sh(["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "sport", str(self.port), "0xffff", "flowid", "1:10"])
        wait_port(self.port)

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.api}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(req).read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Tool:
    """One way of reading a remote image: sealfs (batched or dependent hash fetches) or rclone + kernel."""

    def __init__(self, name, kind, url, digest=None, env=None, args=()):
        self.name, self.kind, self.url, self.digest, self.env = name, kind, url, digest, env or {}
        self.args = list(args)
        self.mp = tempfile.mkdtemp(prefix="sealfs-remote-mnt-")
        self.inner = tempfile.mkdtemp(prefix="sealfs-remote-img-")
        self.cache = tempfile.mkdtemp(prefix="sealfs-remote-cache-")

    def mount(self):
        shutil.rmtree(self.cache, ignore_errors=True)
        os.makedirs(self.cache)
        if self.kind == "sealfs":
            env = dict(os.environ, **self.env)
            sh([SEALFS, "mount", *MOUNT_ARGS, *self.args, "--digest", self.digest, "--cache-dir", self.cache, self.url, self.mp],
               env=env)
            target = self.mp
        else:
            base, name = self.url.rsplit("/", 1)
            sh(["rclone", "mount", ":http:", self.inner, "--http-url", base + "/", "--read-only",
                "--vfs-cache-mode", "full", "--cache-dir", self.cache, "--daemon"])
            deadline = time.time() + 10
            while not os.path.ismount(self.inner):
                if time.time() > deadline:
                    raise RuntimeError("rclone did not mount")
                time.sleep(0.05)
            kmount.mount_file(os.path.join(self.inner, name), self.mp)  # file-backed, on the rclone file
            target = self.mp
        deadline = time.time() + 10
        while not os.path.ismount(target):
            if time.time() > deadline:
                raise RuntimeError(f"{self.name}: not mounted")
            time.sleep(0.02)

    def umount(self):
        if os.path.ismount(self.mp):
            if self.kind == "sealfs":
                sh([SEALFS, "umount", self.mp])
            else:
                sh(["umount", self.mp])
        if os.path.ismount(self.inner):
            sh(["fusermount3", "-u", self.inner])
        time.sleep(0.2)


def run(table, tools, op, nginx):
    for rnd in range(RUNS + 1):
        for t in tools:
            t.umount()
            drop_caches()
            t.mount()
            before = nginx.bytes_sent()
            start = time.perf_counter()
            used = op(t)
            secs = time.perf_counter() - start
            fetched = nginx.bytes_sent() - before
            t.umount()
            if rnd > 0:
                ROWS.append((table, rnd, t.name, secs, used, fetched))
                print(f"{table} round {rnd} {t.name}: {secs:.2f} s, {used} bytes used, {fetched} fetched", file=sys.stderr)


def read_all(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += len(b)


def main():
    tables = sys.argv[1:] or ["seq", "cat", "ls"]
    if os.geteuid() != 0:
        sys.exit("remote.py: run as root (mounts, drop_caches)")
    if os.environ.get("SEALFS_REMOTE_BENCH_NETNS") != "1":
        # Into a network namespace of our own (mounts stay visible: the mount namespace is shared).
        env = dict(os.environ, SEALFS_REMOTE_BENCH_NETNS="1")
        os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    sh(["ip", "link", "set", "lo", "up"])
    for tool in ("nginx", "rclone", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"remote.py: {tool} not found")
    if not os.access(TOXIPROXY, os.X_OK):
        sys.exit(f"remote.py: no toxiproxy at {TOXIPROXY} (scripts/build-oracles.sh builds it)")
    work = tempfile.mkdtemp(prefix="sealfs-remote-bench-", dir=CORPUS)
    www = os.path.join(work, "www")
    os.makedirs(www)
    digests = {}
    if "seq" in tables:
        digests["big"] = sh([SEALFS, "build", "-q", "-T", "0", "-z", "lz4hc", "-C", "65536",
                             os.path.join(CORPUS, "big"), os.path.join(www, "big.sealfs")]).strip()
    if "catz" in tables:
        args = os.environ.get("CATZ_ARGS", "--preset small").split()
        digests["linuxz"] = sh([SEALFS, "build", "-q", "-T", "0"] + args + [
            os.path.join(CORPUS, "linux"), os.path.join(www, "linuxz.sealfs")]).strip()
    if "cat" in tables or "ls" in tables:
        digests["linux"] = sh([SEALFS, "build", "-q", "-T", "0", os.path.join(CORPUS, "linux"),
                               os.path.join(www, "linux.sealfs")]).strip()
    nginx = Nginx(www, work)
    link = Link(nginx.port)
    try:
        def tools(image, fill=False):
            url = f"http://127.0.0.1:{link.port}/{image}.sealfs"
            # The default is `--fill=auto`; with `fill`, the rows of `--fill=on` and of `--fill=off`
            # (the lazy path: each block fetched when first read) too.
            modes = [Tool(f"sealfs --fill={m}", "sealfs", url, digests[image], args=[f"--fill={m}"])
                     for m in ("on", "off")] if fill else []
            return [
                Tool("sealfs", "sealfs", url, digests[image]),
            ] + modes + [
                Tool("sealfs, dependent hash fetches", "sealfs", url, digests[image],
                     {"SEALFS_DEPENDENT_HASH_FETCH": "1"}),
                Tool("rclone + kernel (unverified)", "rclone", url),
            ]
        if "seq" in tables:
            run("seq", tools("big"), lambda t: read_all(os.path.join(t.mp, "linux.tar")), nginx)
        if "cat" in tables or "catz" in tables or "ls" in tables:
            pick = random.Random(42).sample(regular_files(os.path.join(CORPUS, "linux")), 2000)
        if "cat" in tables:
            run("cat", tools("linux", fill=True), lambda t: sum(read_all(os.path.join(t.mp, f)) for f in pick), nginx)
        if "catz" in tables:
            run("catz", tools("linuxz", fill=True),
                lambda t: sum(read_all(os.path.join(t.mp, f)) for f in pick), nginx)
        if "ls" in tables:
            def ls(t):
                out = subprocess.run(["ls", "-lR", t.mp], stdout=subprocess.PIPE, check=True).stdout
                return len(out)
            run("ls", tools("linux"), ls, nginx)
    finally:
        link.stop()
        nginx.stop()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with open(os.path.join(HERE, "results", f"remote-{stamp}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["table", "round", "tool", "seconds", "bytes_used", "bytes_fetched"])
        w.writerows(ROWS)
    print("| workload | tool | seconds, median (min-max) | MB/s | bytes fetched per byte used |")
    print("|---|---|---|---|---|")
    for table in tables:
        for name in dict.fromkeys(r[2] for r in ROWS if r[0] == table):
            rs = [r for r in ROWS if r[0] == table and r[2] == name]
            secs = [r[3] for r in rs]
            med = statistics.median(secs)
            used = statistics.median(r[4] for r in rs)
            fetched = statistics.median(r[5] for r in rs)
            rate = used / med / 1e6 if table != "ls" else float("nan")
            # The link's use: the bytes that crossed it (fetched, compressed) per second.
            share = (f" (link {fetched / med / 1e6:.1f} MB/s, {fetched / med / 1e6 / LINK_MBPS * 100:.0f}% of it)"
                     if table == "seq" else "")
            print(f"| {table} | {name} | {med:.2f} ({min(secs):.2f}-{max(secs):.2f}) | {rate:.1f}{share} | "
                  f"{fetched / used:.2f} |" if used else f"| {table} | {name} | {med:.2f} | | |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
