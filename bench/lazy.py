#!/usr/bin/env python3
"""Lazy layers (issue 40, Benchmark): from `crictl pull` to the first output of a container, over
the emulated link, for containerd 2.x's `overlayfs` (a full pull), `sealfs snapshotter` with lazy
layers (the image converted by `sealfs convert --push --key`) and soci-snapshotter 0.16 (a SOCI v1
index made by its own `soci create` and `soci push`).

    bench/lazy.py        (as root; RUNS=3, SEALFS=target/release/sealfs,
                          CONTAINERD2=target/oracles/containerd-2.4.2/bin,
                          CRICTL=target/oracles/crictl, TOXIPROXY=target/oracles/toxiproxy-server,
                          SOCI=/work/soci-build/bin (soci, soci-snapshotter-grpc),
                          WAYS="overlayfs sealfs soci" (also `sealfs-OPTION-VALUE...`:
                          `sealfs snapshotter --lazy-OPTION VALUE`, e.g. sealfs-fill-off;
                          `sealfs...@NAME`: the sealfs binary of env SEALFS_NAME, e.g.
                          sealfs@before with SEALFS_BEFORE=an earlier build;
                          sealfs-prefetch-off: the referrer's prefetch list ignored),
                          PREFETCH=bench/lazy-prefetch.txt (the list `convert --prefetch`
                          puts in the referrer; made by strace if missing, see below),
                          CONTAINERD_LOG_LEVEL=info,
                          SEALFS_SNAPSHOTTER_ARGS= more `sealfs snapshotter` options,
                          WINDOW=45 seconds from the pull's start that a run lasts,
                          KEEP=1 keeps each run's directory and logs)

The image (made once into bench/.lazy/, delete it to make it again): `debootstrap --variant=minbase
bookworm` with `python3` installed by apt, as one layer, and the linux-source-6.1 tree of
`bench/corpus.sh linux` as a second layer (/usr/src/linux), by umoci: 1.5 GB unpacked, 315 MB of
gzip. Pushed by skopeo to a Debian docker-registry, with a busybox sandbox (pause) image.

The link is bench/remote.py's: the script runs itself in a network namespace of its own, where
toxiproxy in front of the registry adds 10 ms each way and an HTB class on loopback shapes what it
sends to 1 Gbit/s. containerd, the snapshotters and `crictl` reach the registry only through it;
the conversions (`sealfs convert`, `soci create` + `soci push`) talk to the registry directly.

The prefetch list (bench/lazy-prefetch.txt, committed; delete it to make it again): the
absolute paths the container's command touches as it starts (`strace -f -e trace=%file` of
`/bin/sh -c 'python3 -c PROGRAM'` in a chroot of the python layer's rootfs, the container's
PATH), then the four files it reads. `sealfs convert --prefetch` puts it in the referrer; the
snapshotter replays it at each lazy mount (`--lazy-prefetch`, default `only`).

Each run: a new containerd 2.x with its CRI plugin (empty root; the snapshotter's root empty too),
the sandbox image pulled first (`crictl pull`, not timed, as a node has its pause image), the page
cache dropped; then, timed from the start of `crictl pull IMAGE`: `crictl runp` of a pod on the
host's network, `crictl create` and `start` of a container running `python3 -c ...` that reads
the linux tree's Makefile and three other files and prints a line; the time is when that line
appears in the container's log file (polled every 10 ms). Then the run goes on until WINDOW
seconds from the pull's start: what the snapshotters' background fetches (sealfs's fill, soci's
background fetcher, which waits 30 s after a mount by default) have fetched by then.

Bytes and requests are the registry's own: its access log (one line per request, the response's
body bytes), read at the first output and at the end. The ways run interleaved (the order turns
each round), median (min-max) of RUNS.

Writes bench/results/lazy-<stamp>.csv and prints Markdown tables for docs/benchmarks.md.
"""
import csv
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no bench/__pycache__ from the imports below
import remote  # noqa: E402  (the link: toxiproxy and HTB)
from snapshotter import drop_caches, free_port, sh, wait_for  # noqa: E402

RUNS = int(os.environ.get("RUNS", "3"))
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
CTD2 = os.environ.get("CONTAINERD2", os.path.join(REPO, "target/oracles/containerd-2.4.2/bin"))
CRICTL = os.environ.get("CRICTL", os.path.join(REPO, "target/oracles/crictl"))
SOCI = os.environ.get("SOCI", "/work/soci-build/bin")
WAYS = os.environ.get("WAYS", "overlayfs sealfs soci").split()
LOG_LEVEL = os.environ.get("CONTAINERD_LOG_LEVEL", "info")
SNAPSHOTTER_ARGS = os.environ.get("SEALFS_SNAPSHOTTER_ARGS", "").split()
WINDOW = float(os.environ.get("WINDOW", "45"))
KEEP = os.environ.get("KEEP") == "1"
RUNS_TMPFS = os.environ.get("RUNS_TMPFS", "8g")
CORPUS = os.environ.get("CORPUS_DIR", os.path.join(HERE, ".corpus"))
LINUX = os.path.join(CORPUS, "linux/linux-source-6.1")
WORK = os.path.join(HERE, ".lazy")
MIRROR = "http://deb.debian.org/debian"
PLATFORM = "linux/amd64"
# What the container reads: the linux tree's Makefile and three other files.
FILES = ["/usr/src/linux/Makefile", "/usr/src/linux/kernel/sched/core.c",
         "/usr/src/linux/fs/erofs/super.c", "/usr/src/linux/include/linux/fs.h"]
PROGRAM = ("n = sum(len(open(p, 'rb').read()) for p in %r); print('first-output', n, flush=True)"
           % FILES)
# The prefetch list `sealfs convert --prefetch` puts in the referrer: made once (delete it to
# make it again) by `make_prefetch_list`, committed.
PREFETCH = os.environ.get("PREFETCH", os.path.join(HERE, "lazy-prefetch.txt"))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_layout():
    """The umoci layout WORK/layout with tags `bench` (Debian minbase + python3, then the linux
    tree) and `pause` (busybox sleeping)."""
    layout = os.path.join(WORK, "layout")
    if os.path.exists(os.path.join(WORK, "layout.done")):
        make_prefetch_list(os.path.join(WORK, "rootfs"))
        return layout
    shutil.rmtree(layout, ignore_errors=True)
    rootfs = os.path.join(WORK, "rootfs")
    if not os.path.exists(os.path.join(rootfs, "usr/bin/python3")):
        shutil.rmtree(rootfs, ignore_errors=True)
        log("debootstrap --variant=minbase bookworm, then python3")
        sh(["debootstrap", "--variant=minbase", "bookworm", rootfs, MIRROR])
        sh(["chroot", rootfs, "apt-get", "install", "-y", "-q", "--no-install-recommends", "python3"])
        sh(["chroot", rootfs, "apt-get", "clean"])
    sh(["umoci", "init", "--layout", layout])
    sh(["umoci", "new", "--image", f"{layout}:bench"])
    sh(["umoci", "insert", "--image", f"{layout}:bench", rootfs, "/"])
    sh(["umoci", "insert", "--image", f"{layout}:bench", LINUX, "/usr/src/linux"])
    sh(["umoci", "config", "--image", f"{layout}:bench", "--config.cmd", "/bin/sh"])
    pb = os.path.join(WORK, "pause-bundle")
    shutil.rmtree(pb, ignore_errors=True)
    os.makedirs(os.path.join(pb, "bin"))
    shutil.copy("/bin/busybox", os.path.join(pb, "bin"))
    os.symlink("busybox", os.path.join(pb, "bin/sleep"))
    sh(["umoci", "new", "--image", f"{layout}:pause"])
    sh(["umoci", "insert", "--image", f"{layout}:pause", pb, "/"])
    sh(["umoci", "config", "--image", f"{layout}:pause", "--config.entrypoint", "/bin/sleep",
        "--config.cmd", "86400"])
    shutil.rmtree(pb)
    open(os.path.join(WORK, "layout.done"), "w").close()
    make_prefetch_list(rootfs)
    return layout


def make_prefetch_list(rootfs):
    """PREFETCH, if missing: the absolute paths that the container's command touches (open,
    stat, exec: `strace -f -e trace=%file`), run in a chroot of the python layer's rootfs with
    the container's environment, first seen first, with the ELF interpreter of each program it
    executes (`readelf -l`; the kernel loads it without a system call strace shows); then FILES (in the linux layer, not in that
    rootfs: python stops at the first)."""
    if os.path.exists(PREFETCH):
        return
    out = os.path.join(WORK, "strace.txt")
    subprocess.run(["env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "strace", "-f", "-qq", "-e", "trace=%file", "-o", out, "chroot", rootfs,
                    "/bin/sh", "-c", f'cd / && python3 -c "{PROGRAM}"'], capture_output=True)
    paths, on = [], False
    for line in open(out, errors="replace"):
        if not on:
            # What chroot itself reads, before it enters the rootfs, is the host's.
            on = " chroot(" in line
            continue
        paths += re.findall(r'"(/[^"]*)"', line)
        # The kernel loads an executed program's ELF interpreter without a system call to show.
        m = re.search(r'execve\("(/[^"]*)".* = 0$', line)
        if m:
            elf = subprocess.run(["readelf", "-l", os.path.join(rootfs, m.group(1).lstrip("/"))],
                                 capture_output=True, text=True).stdout
            paths += re.findall(r"program interpreter: (/[^\]]*)\]", elf)
    paths = list(dict.fromkeys(p for p in paths + FILES if p != "/"))
    with open(PREFETCH, "w") as f:
        f.write(f"# bench/lazy.py: what `python3 -c PROGRAM` touches as it starts, by strace in a\n"
                f"# chroot of the python layer's rootfs (and the ELF interpreter of what it runs),\n"
                f"# then the four files it reads ({len(paths)} paths)\n")
        f.write("".join(p + "\n" for p in paths))


class Registry:
    """Debian's docker-registry on 127.0.0.1, its access log (one line per request) in `work`."""

    def __init__(self, work):
        self.port = free_port()
        os.makedirs(os.path.join(work, "storage"), exist_ok=True)
        conf = os.path.join(work, "registry.yml")
        with open(conf, "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n"
                    f"    rootdirectory: {work}/storage\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{self.port}\n"
                    f"  secret: bench\n")
        self.log = os.path.join(work, "registry.log")
        out = open(self.log, "a")
        self.proc = subprocess.Popen(["docker-registry", "serve", conf], stdout=out, stderr=out)

        def up():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_for("docker-registry", up)

    def requests(self):
        """The access log's requests so far: (method, path, status, body bytes)."""
        out = []
        for line in open(self.log, errors="replace"):
            m = re.search(r'"(\w+) (\S+) HTTP/[\d.]+" (\d+) (\d+|-)', line)
            if m:
                n = m.group(4)
                # A HEAD's line gives the length of the body it did not send.
                sent = int(n) if n.isdigit() and m.group(1) != "HEAD" else 0
                out.append((m.group(1), m.group(2), int(m.group(3)), sent))
        return out

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def timed(cmd, **kw):
    t = time.monotonic()
    out = sh(cmd, **kw)
    return time.monotonic() - t, out


def prepare(layout, registry):
    """Push the images, convert for sealfs, index for soci: the times and facts, in a JSON file
    of the registry's work directory (made once per registry storage)."""
    facts_path = os.path.join(WORK, "registry", "facts.json")
    if os.path.exists(facts_path):
        return json.load(open(facts_path))
    host = f"127.0.0.1:{registry.port}"
    image, pause = f"{host}/bench/img:1", f"{host}/bench/pause:1"
    for tag, ref in [("bench", image), ("pause", pause)]:
        sh(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}",
            f"docker://{ref}"])
    manifest = json.loads(sh(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{image}"]))
    facts = {"layers": [(l["digest"], l["size"]) for l in manifest["layers"]]}
    facts["image_bytes"] = sum(s for _, s in facts["layers"])
    key = os.path.join(WORK, "key.pem")
    if not os.path.exists(key):
        sh([SEALFS, "keygen", key])
    cache = tempfile.mkdtemp(prefix="sealfs-lazy-convert-cache-")
    env = dict(os.environ, SEALFS_CACHE_DIR=cache, DOCKER_CONFIG="/nonexistent")
    env.pop("REGISTRY_AUTH_FILE", None)
    drop_caches()
    log("sealfs convert --push")
    facts["convert_s"], out = timed([SEALFS, "convert", f"oci+http://{image}", "--push", "--key", key,
                                     "--prefetch", PREFETCH], env=env)
    facts["prefetch"] = PREFETCH
    shutil.rmtree(cache, ignore_errors=True)
    facts["convert_out"] = out
    if "soci" in WAYS:
        try:
            facts.update(soci_index(image))
        except Exception as e:  # noqa: BLE001  the other rows stand without it
            facts["soci_error"] = str(e)
            log(f"soci: {e}")
    json.dump(facts, open(facts_path, "w"), indent=1)
    return facts


def soci_index(image):
    """`soci create` + `soci push` of `image` (a SOCI v1 index, its zTOCs), through a containerd
    of its own that has pulled the image: the times."""
    d = tempfile.mkdtemp(prefix="sealfs-lazy-soci-")
    with open(f"{d}/config.toml", "w") as f:
        f.write(f'version = 3\nroot = "{d}/root"\nstate = "{d}/state"\n'
                f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                f'[grpc]\n  address = "{d}/containerd.sock"\n'
                f"[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n")
    env = dict(os.environ, PATH=f"{CTD2}:{os.environ['PATH']}")
    ctd = subprocess.Popen([f"{CTD2}/containerd", "--config", f"{d}/config.toml"],
                           stdout=subprocess.DEVNULL, stderr=open(f"{d}/containerd.log", "w"), env=env)
    ctr = [f"{CTD2}/ctr", "--address", f"{d}/containerd.sock"]
    try:
        wait_for("containerd", lambda: subprocess.run(ctr + ["version"], capture_output=True).returncode == 0)
        pull_s, _ = timed(ctr + ["content", "fetch", "--plain-http", image])
        soci = [f"{SOCI}/soci", "--address", f"{d}/containerd.sock", "--root", f"{d}/soci"]
        log("soci create")
        create_s, out = timed(soci + ["create", image])
        log("soci push")
        push_s, out2 = timed(soci + ["push", "--plain-http", image])
        return {"soci_fetch_s": pull_s, "soci_create_s": create_s, "soci_push_s": push_s,
                "soci_out": out + out2}
    finally:
        ctd.terminate()
        ctd.wait()
        if not KEEP:
            shutil.rmtree(d, ignore_errors=True)


def cri_config(d, way, pause, host):
    """containerd's config: the CRI plugin on `way`'s snapshotter with snapshot annotations on
    (what crates/cli/tests/snapshotter_lazy.rs and soci's docs/kubernetes.md configure), the
    proxy plugins of that way only."""
    proxies = {
        "overlayfs": "",
        # docs/usage.md: the sealfs differ first, the walking one for the rest.
        "sealfs": (f'[proxy_plugins.sealfs]\n  type = "snapshot"\n  address = "{d}/sealfs.sock"\n'
                   f'[proxy_plugins.sealfs-diff]\n  type = "diff"\n  address = "{d}/sealfs.sock"\n'
                   "[plugins.'io.containerd.service.v1.diff-service']\n"
                   '  default = ["sealfs-diff", "walking"]\n'),
        "soci": (f'[proxy_plugins.soci]\n  type = "snapshot"\n  address = "{d}/soci.sock"\n'
                 f'[proxy_plugins.soci.exports]\n  root = "{d}/soci"\n'),
    }[way]
    unpack = "".join(
        f"[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n"
        f'  platform = "{PLATFORM}"\n  snapshotter = "{s}"\n'
        + ('  differ = "sealfs-diff"\n' if s == "sealfs" else "")
        for s in dict.fromkeys(["overlayfs", way]))
    return (
        f'version = 3\nroot = "{d}/root"\nstate = "{d}/state"\n'
        f'[grpc]\n  address = "{d}/containerd.sock"\n{proxies}'
        f"[plugins.'io.containerd.nri.v1.nri']\n  disable = true\n{unpack}"
        f"[plugins.'io.containerd.cri.v1.images']\n  snapshotter = \"{way}\"\n"
        "  disable_snapshot_annotations = false\n"
        f"[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = \"{pause}\"\n"
        f"[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = \"{d}/certs.d\"\n"
        "[plugins.'io.containerd.cri.v1.runtime']\n  restrict_oom_score_adj = true\n"
        "[plugins.'io.containerd.cri.v1.runtime'.cni]\n"
        f'  bin_dirs = ["{d}/cni/bin"]\n  conf_dir = "{d}/cni/conf"\n'
        f'[debug]\n  level = "{LOG_LEVEL}"\n'
    )


def listening(sock):
    def f():
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            s.close()
            return True
        except OSError:
            return False
    return f


class Node:
    """containerd 2.x with its CRI plugin on `way`'s snapshotter, the registry `host` (the link's
    end) over plain HTTP, and crictl."""

    def __init__(self, way, host, pause, public):
        # `sealfs...@NAME`: the binary of env SEALFS_NAME (an earlier build, interleaved).
        way, _, alt = way.partition("@")
        self.sealfs = os.environ[f"SEALFS_{alt.upper()}"] if alt else SEALFS
        # `sealfs-OPTION-VALUE...`: sealfs with `--lazy-OPTION VALUE...` (`sealfs-fill-off`).
        way, *opts = way.split("-")
        self.lazy_args = [a for o, v in zip(opts[::2], opts[1::2]) for a in (f"--lazy-{o}", v)]
        self.way = way
        self.dir = d = tempfile.mkdtemp(prefix="sealfs-lazy-ctd-", dir=os.path.join(WORK, "runs"))
        # Its own directory: the ways' containerds and snapshotters do not share a page cache
        # entry, a store or a cache.
        certs = f"{d}/certs.d/{host}"
        os.makedirs(certs)
        with open(f"{certs}/hosts.toml", "w") as f:
            f.write(f'server = "http://{host}"\n[host."http://{host}"]\n  capabilities = ["pull", "resolve"]\n')
        for sub in ["cni/bin", "cni/conf", "pod-logs"]:
            os.makedirs(f"{d}/{sub}")
        with open(f"{d}/config.toml", "w") as f:
            f.write(cri_config(d, way, pause, host))
        self.procs = []
        if way == "sealfs":
            self.procs.append(subprocess.Popen(
                [self.sealfs, "snapshotter", "--root", f"{d}/sealfs", "--address", f"{d}/sealfs.sock",
                 "--containerd-address", f"{d}/containerd.sock", "--lazy-key", public,
                 "--plain-http", host, *self.lazy_args, *SNAPSHOTTER_ARGS],
                stdout=subprocess.DEVNULL, stderr=open(f"{d}/snapshotter.log", "w")))
            wait_for("sealfs snapshotter", listening(f"{d}/sealfs.sock"))
        if way == "soci":
            with open(f"{d}/soci.toml", "w") as f:
                f.write("[pull_modes.soci_v1]\n  enable = true\n")
            self.procs.append(subprocess.Popen(
                [f"{SOCI}/soci-snapshotter-grpc", "--address", f"{d}/soci.sock", "--root", f"{d}/soci",
                 "--config", f"{d}/soci.toml", "--log-level", "debug" if LOG_LEVEL == "debug" else "info"],
                stdout=open(f"{d}/soci.log", "w"), stderr=subprocess.STDOUT))
            wait_for("soci-snapshotter-grpc", listening(f"{d}/soci.sock"))
        env = dict(os.environ, PATH=f"{CTD2}:{os.environ['PATH']}")
        self.procs.append(subprocess.Popen(
            [f"{CTD2}/containerd", "--config", f"{d}/config.toml"],
            stdout=subprocess.DEVNULL, stderr=open(f"{d}/containerd.log", "w"), env=env))
        with open(f"{d}/crictl.yaml", "w") as f:
            f.write(f"runtime-endpoint: unix://{d}/containerd.sock\n"
                    f"image-endpoint: unix://{d}/containerd.sock\ntimeout: 300\n")
        wait_for("the CRI plugin",
                 lambda: subprocess.run(self.crictl("version"), capture_output=True).returncode == 0,
                 timeout=60)
        self.pod = None

    def crictl(self, *args):
        return [CRICTL, "--config", f"{self.dir}/crictl.yaml", *args]

    def ok(self, *args):
        """crictl ARGS that must succeed: its stdout (its warnings on stderr left out)."""
        r = subprocess.run(self.crictl(*args), capture_output=True, text=True)
        if r.returncode != 0:
            tail = "".join(open(f"{self.dir}/containerd.log", errors="replace").readlines()[-30:])
            raise RuntimeError(f"crictl {' '.join(args)}: exit {r.returncode}: {r.stdout}{r.stderr}\n"
                               f"containerd log (end):\n{tail}")
        return r.stdout.strip()

    def run(self, image):
        """pull, runp, create, start: the monotonic time when the container's line appeared."""
        d = self.dir
        self.ok("pull", image)
        with open(f"{d}/pod.json", "w") as f:
            json.dump({"metadata": {"name": "bench", "namespace": "default", "uid": "bench-uid", "attempt": 0},
                       "log_directory": f"{d}/pod-logs",
                       "linux": {"security_context": {"namespace_options": {"network": 2}}}}, f)
        with open(f"{d}/container.json", "w") as f:
            json.dump({"metadata": {"name": "first"}, "image": {"image": image},
                       "command": ["/bin/sh", "-c", f'python3 -c "{PROGRAM}"; sleep 3600'],
                       "log_path": "first.log", "linux": {}}, f)
        self.pod = self.ok("runp", f"{d}/pod.json")
        cid = self.ok("create", self.pod, f"{d}/container.json", f"{d}/pod.json")
        self.ok("start", cid)
        logf = f"{d}/pod-logs/first.log"
        deadline = time.monotonic() + 300
        while True:
            try:
                text = open(logf, errors="replace").read()
            except OSError:
                text = ""
            if "first-output" in text:
                return time.monotonic(), text
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.way}: no output in 300 s: {text}")
            time.sleep(0.01)

    def stop(self):
        if self.pod:
            subprocess.run(self.crictl("stopp", self.pod), capture_output=True)
            subprocess.run(self.crictl("rmp", "--force", self.pod), capture_output=True)
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        mounts = [l.split()[1] for l in open("/proc/mounts") if l.split()[1].startswith(self.dir)]
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", m])
        if KEEP:
            # The logs only: the stores would fill the disk.
            for sub in ["root", "state", "sealfs", "soci"]:
                shutil.rmtree(f"{self.dir}/{sub}", ignore_errors=True)
            log(f"kept the logs in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def measure(way, registry, host, public):
    image, pause = f"{host}/bench/img:1", f"{host}/bench/pause:1"
    node = Node(way, host, pause, public)
    try:
        node.ok("pull", pause)
        drop_caches()
        before = len(registry.requests())
        t0 = time.monotonic()
        t1, text = node.run(image)
        at_first = registry.requests()[before:]
        # Then what the background fetches add, until WINDOW seconds from the pull's start.
        time.sleep(max(0.0, t0 + WINDOW - time.monotonic()))
        total = registry.requests()[before:]
        m = {"time": t1 - t0, "requests_first": len(at_first),
             "bytes_first": sum(r[3] for r in at_first), "requests_total": len(total),
             "bytes_total": sum(r[3] for r in total), "settled": time.monotonic() - t0,
             "output": text.strip().split("\n")[0]}
        if KEEP:
            with open(f"{node.dir}/requests.txt", "w") as f:
                for i, r in enumerate(total):
                    f.write(("* " if i < len(at_first) else "  ") + " ".join(map(str, r)) + "\n")
        if way.startswith("sealfs"):
            slog = open(f"{node.dir}/snapshotter.log", errors="replace").read()
            m["lazy_layers"] = slog.count("committed lazily")
        return m
    finally:
        node.stop()


def fmt(values, f="{:.2f}"):
    med = statistics.median(values)
    return f"{f.format(med)} ({f.format(min(values))}–{f.format(max(values))})"


def main():
    if os.geteuid() != 0:
        sys.exit("bench/lazy.py: run as root (containerd, mounts, drop_caches, tc)")
    if os.environ.get("SEALFS_LAZY_BENCH_NETNS") != "1":
        # The image is made first, outside the namespace: debootstrap needs the Debian mirror.
        make_layout()
        env = dict(os.environ, SEALFS_LAZY_BENCH_NETNS="1")
        os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    sh(["ip", "link", "set", "lo", "up"])
    for p in [SEALFS, f"{CTD2}/containerd", CRICTL, remote.TOXIPROXY]:
        if not os.path.exists(p):
            sys.exit(f"bench/lazy.py: {p} missing (cargo build --release; scripts/build-oracles.sh toxiproxy)")
    layout = make_layout()
    # The runs' directories (containerd's root, the snapshotters') on a tmpfs: this machine's
    # ext4 discards on delete, and removing an unpacked image's 86,000 files took minutes.
    runs = os.path.join(WORK, "runs")
    os.makedirs(runs, exist_ok=True)
    if not os.path.ismount(runs):
        sh(["mount", "-t", "tmpfs", "-o", f"size={RUNS_TMPFS}", "sealfs-lazy-bench", runs])
    regwork = os.path.join(WORK, "registry")
    if not os.path.exists(os.path.join(regwork, "facts.json")):
        shutil.rmtree(regwork, ignore_errors=True)
    registry = Registry(regwork)
    link = None
    try:
        facts = prepare(layout, registry)
        link = remote.Link(registry.port)
        host = f"127.0.0.1:{link.port}"
        public = os.path.join(WORK, "key.pem.pub")
        ways = [w for w in WAYS if w != "soci" or "soci_error" not in facts]
        results = {w: [] for w in ways}
        for r in range(RUNS):
            order = ways[r % len(ways):] + ways[: r % len(ways)]
            for w in order:
                try:
                    m = measure(w, registry, host, public)
                except Exception as e:  # noqa: BLE001
                    if w != "soci":
                        raise
                    facts["soci_error"] = str(e)
                    log(f"soci: {e}")
                    ways.remove("soci")
                    results.pop("soci")
                    continue
                results[w].append(m)
                log(f"round {r + 1} {w}: {m}")
    finally:
        if link:
            link.stop()
        registry.stop()
        if not KEEP:
            subprocess.run(["umount", runs])
    stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", f"lazy-{stamp}.csv")
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["way", "round", "seconds_to_first_output", "requests_to_first_output",
                    "bytes_to_first_output", "requests_total", "bytes_total", "seconds_settled",
                    "image_bytes"])
        for way, ms in results.items():
            for i, m in enumerate(ms):
                w.writerow([way, i + 1, f"{m['time']:.3f}", m["requests_first"], m["bytes_first"],
                            m["requests_total"], m["bytes_total"], f"{m['settled']:.1f}", facts["image_bytes"]])
    img = facts["image_bytes"]
    base = results.get("overlayfs")
    print(f"image: {img:,} bytes in {len(facts['layers'])} layer blobs\n")
    print("| way | pull to first output, s | / overlayfs | requests to first output | MB fetched to first output | of the image | MB fetched in all | requests in all |")
    print("|---|---|---|---|---|---|---|---|")
    for way, ms in results.items():
        t = [m["time"] for m in ms]
        rel = f"{statistics.median(t) / statistics.median([m['time'] for m in base]):.2f}×" if base else "–"
        bf = [m["bytes_first"] / 1e6 for m in ms]
        share = statistics.median(m["bytes_first"] for m in ms) / img * 100
        print(f"| {way} | {fmt(t)} | {rel} | {fmt([m['requests_first'] for m in ms], '{:.0f}')} | {fmt(bf, '{:.1f}')} | "
              f"{share:.1f}% | {fmt([m['bytes_total'] / 1e6 for m in ms], '{:.1f}')} | "
              f"{fmt([m['requests_total'] for m in ms], '{:.0f}')} |")
    print(f"\nsealfs convert --push: {facts['convert_s']:.1f} s")
    if "soci_create_s" in facts:
        print(f"soci: content fetch {facts['soci_fetch_s']:.1f} s, create {facts['soci_create_s']:.1f} s, "
              f"push {facts['soci_push_s']:.1f} s")
    if "soci_error" in facts:
        print(f"soci: not measured: {facts['soci_error']}")
    print(f"\n(raw rows: {os.path.relpath(out, REPO)})")


if __name__ == "__main__":
    main()
