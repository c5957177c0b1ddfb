#!/usr/bin/env python3
"""Images in an OCI registry over the emulated wide-area link of bench/remote.py (20 ms round trip,
1 Gbit/s): `sealfs mount oci+http://...` (the image read lazily from Debian's docker-registry, the
CNCF distribution registry) against (a) `sealfs mount http://...` of the same image served by
nginx, and (b) `skopeo copy` of the whole artifact followed by a local read (the kernel's EROFS
mount of the copied blob, unverified).

    bench/registry.py [TABLE...]    (as root; RUNS=5, SEALFS=target/release/sealfs,
                                     CORPUS_DIR=bench/.corpus, TREE=linux: the tree under CORPUS_DIR)

TABLE is any of first, ls, cat (default: all):
  first  time to the first byte of one file (a fixed one): mount (or copy and mount) and read one
         byte; the registry adds one manifest round trip at open, nothing per read;
  ls     `ls -lR` of the mount (after mounting: the mount is not timed for sealfs; for skopeo, the
         copy is part of the time, as a user who wants to list the image waits for it);
  cat    `cat` of 200 random files (fixed seed) of the tree, likewise.

The issue's targets: within 1.15x of nginx on every workload; time to first byte at most 1/20 of
the full pull (the skopeo row of `first`).

The link is bench/remote.py's `Link` (toxiproxy for delay, an HTB class for rate; this kernel has
no sch_netem), with a second proxy on the same toxiproxy in front of the registry, shaped by the
same HTB class. Cold: page cache dropped, fresh mount, empty sealfs cache. Interleaved, one
untimed warm-up round, median (min-max) of RUNS. Writes bench/results/registry-<stamp>.csv and
prints a Markdown table.
"""
import csv
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kmount  # noqa: E402  (file-backed kernel mounts)
import remote  # noqa: E402  (the link, nginx, helpers)
from remote import Link, Nginx, drop_caches, free_port, read_all, sh, wait_port  # noqa: E402

HERE = remote.HERE
RUNS = int(os.environ.get("RUNS", "5"))
SEALFS = remote.SEALFS
CORPUS = remote.CORPUS
TREE = os.environ.get("TREE", "linux")
ROWS = []


class Registry:
    """docker-registry on 127.0.0.1 with filesystem storage in `work`, its blob descriptors cached
    in memory as Debian's /etc/docker/registry/config.yml sets (without it, every request reads
    the repository's link file again: about twice the time per range request)."""

    def __init__(self, work):
        self.port = free_port()
        conf = os.path.join(work, "registry.yml")
        with open(conf, "w") as f:
            f.write(f"""version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: {work}/storage
http:
  addr: 127.0.0.1:{self.port}
""")
        self.proc = subprocess.Popen(["docker-registry", "serve", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def serve(src, work):
    """`src` built into `work`/www/tree.sealfs, served by nginx behind the link and pushed to a
    registry (as bench/tree:v1) behind a second proxy of it; returns (image, digest, nginx,
    registry, link, the registry proxy's port)."""
    www = os.path.join(work, "www")
    os.makedirs(www)
    image = os.path.join(www, "tree.sealfs")
    digest = sh([SEALFS, "build", "-q", "-T", "0", src, image]).strip()
    nginx = Nginx(www, work)
    registry = Registry(work)
    sh([SEALFS, "push", image, f"oci+http://127.0.0.1:{registry.port}/bench/tree:v1"])
    link = Link(nginx.port)
    return image, digest, nginx, registry, link, add_proxy(link, "registry", registry.port)


def add_proxy(link, name, upstream):
    """A second proxy on the link's toxiproxy, its traffic to clients in the link's HTB class."""
    port = free_port()
    link.post("/proxies", {"name": name, "listen": f"127.0.0.1:{port}", "upstream": f"127.0.0.1:{upstream}",
                           "enabled": True})
    for stream in ("downstream", "upstream"):
        link.post(f"/proxies/{name}/toxics", {"name": f"latency_{stream}", "type": "latency", "stream": stream,
                                              "attributes": {"latency": 10, "jitter": 0}})
    sh(["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
        "match", "ip", "sport", str(port), "0xffff", "flowid", "1:10"])
    wait_port(port)
    return port


class Way:
    """One way to read the image: `sealfs mount` of a URL or reference, or skopeo copy + kernel."""

    def __init__(self, name, kind, location, digest):
        self.name, self.kind, self.location, self.digest = name, kind, location, digest
        self.mp = tempfile.mkdtemp(prefix="sealfs-registry-mnt-")
        self.cache = tempfile.mkdtemp(prefix="sealfs-registry-cache-")
        self.copy = tempfile.mkdtemp(prefix="sealfs-registry-copy-")

    def mount(self):
        """Mounts (copying first for skopeo); returns the seconds it took."""
        shutil.rmtree(self.cache, ignore_errors=True)
        shutil.rmtree(self.copy, ignore_errors=True)
        os.makedirs(self.cache)
        start = time.perf_counter()
        if self.kind == "sealfs":
            sh([SEALFS, "mount", "--digest", self.digest, "--cache-dir", self.cache, self.location, self.mp])
        else:
            sh(["skopeo", "copy", "--src-tls-verify=false", f"docker://{self.location}", f"dir:{self.copy}"])
            blob = max((os.path.join(self.copy, n) for n in os.listdir(self.copy)), key=os.path.getsize)
            kmount.mount_file(blob, self.mp)  # file-backed: mount(2) of the blob
        return time.perf_counter() - start

    def umount(self):
        if os.path.ismount(self.mp):
            sh([SEALFS, "umount", self.mp] if self.kind == "sealfs" else ["umount", self.mp])
        time.sleep(0.2)


def cold_client(servers):
    """Drops the page cache, then asks each server (port) for a path that is not the image,
    directly, not through the link: the client and the image's bytes start cold, the servers'
    own code does not (drop_caches also evicts a server's executable, which costs docker-registry,
    a 20 MB Go binary, about 80 ms of page faults in its first requests and nginx next to nothing;
    a registry in service has its code in memory)."""
    drop_caches()
    for port, path in servers:
        for _ in range(3):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read()
            except urllib.error.HTTPError:
                pass  # an answer, even a 404, has run the server's request path


def run(table, ways, op, include_mount, servers):
    for rnd in range(RUNS + 1):
        for w in ways:
            w.umount()
            cold_client(servers)
            mounting = w.mount()
            start = time.perf_counter()
            used = op(w)
            secs = time.perf_counter() - start + (mounting if include_mount(w) else 0.0)
            w.umount()
            if rnd > 0:
                ROWS.append((table, rnd, w.name, secs, used))
                print(f"{table} round {rnd} {w.name}: {secs:.3f} s", file=sys.stderr)


def main():
    tables = sys.argv[1:] or ["first", "ls", "cat"]
    if os.geteuid() != 0:
        sys.exit("registry.py: run as root (mounts, drop_caches, tc)")
    if os.environ.get("SEALFS_REMOTE_BENCH_NETNS") != "1":
        env = dict(os.environ, SEALFS_REMOTE_BENCH_NETNS="1")
        os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    sh(["ip", "link", "set", "lo", "up"])
    for tool in ("nginx", "docker-registry", "skopeo"):
        if not shutil.which(tool):
            sys.exit(f"registry.py: {tool} not found")
    if not os.access(remote.TOXIPROXY, os.X_OK):
        sys.exit(f"registry.py: no toxiproxy at {remote.TOXIPROXY} (scripts/build-oracles.sh toxiproxy)")
    src = os.path.join(CORPUS, TREE)
    work = tempfile.mkdtemp(prefix="sealfs-registry-bench-", dir=CORPUS)
    image, digest, nginx, registry, link, reg_port = serve(src, work)
    files = remote.regular_files(src)
    pick = random.Random(42).sample(files, min(200, len(files)))
    first = pick[0]
    servers = [(registry.port, "/v2/"), (nginx.port, "/")]
    try:
        ways = [
            Way("sealfs, registry", "sealfs", f"oci+http://127.0.0.1:{reg_port}/bench/tree:v1", digest),
            Way("sealfs, nginx", "sealfs", f"http://127.0.0.1:{link.port}/tree.sealfs", digest),
            Way("skopeo copy + kernel mount", "skopeo", f"127.0.0.1:{reg_port}/bench/tree:v1", digest),
        ]
        if "first" in tables:
            def one_byte(w):
                with open(os.path.join(w.mp, first), "rb", buffering=0) as f:
                    return len(f.read(1))
            run("first", ways, one_byte, lambda w: True, servers)
        if "ls" in tables:
            def ls(w):
                return len(subprocess.run(["ls", "-lR", w.mp], stdout=subprocess.PIPE, check=True).stdout)
            run("ls", ways, ls, lambda w: w.kind != "sealfs", servers)
        if "cat" in tables:
            run("cat", ways, lambda w: sum(read_all(os.path.join(w.mp, f)) for f in pick),
                lambda w: w.kind != "sealfs", servers)
    finally:
        link.stop()
        nginx.stop()
        registry.stop()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with open(os.path.join(HERE, "results", f"registry-{stamp}.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["table", "round", "way", "seconds", "bytes_used"])
        w.writerows(ROWS)
    print(f"tree: {src} ({len(files)} files); image {os.path.getsize(image)} bytes; RUNS={RUNS}")
    print("| workload | way | seconds, median (min-max) | / nginx |")
    print("|---|---|---|---|")
    for table in tables:
        med = {}
        for name in dict.fromkeys(r[2] for r in ROWS if r[0] == table):
            secs = [r[3] for r in ROWS if r[0] == table and r[2] == name]
            med[name] = (statistics.median(secs), min(secs), max(secs))
        base = med.get("sealfs, nginx", (float("nan"),))[0]
        for name, (m, lo, hi) in med.items():
            print(f"| {table} | {name} | {m:.3f} ({lo:.3f}-{hi:.3f}) | {m / base:.2f} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
