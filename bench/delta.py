#!/usr/bin/env python3
"""Updates v1 -> v2 of real trees over the remote benchmark's link (issue 41, "Benchmark"):
`sealfs pull V2-URL OUT --base V1.img` against casync, zsync and a full download.

    bench/delta.py [--layouts NAME,...] [PAIR...]   (as root, after `cargo build --release -p sealfs-cli` and
                                `scripts/build-oracles.sh toxiproxy`; apt install casync zsync
                                debootstrap; RUNS=3, SEALFS=target/release/sealfs,
                                WORK=/var/tmp/sealfs-delta: the trees, kept across runs)

--layouts: the builds compared (default default,lz4hc,small): any of default, lz4hc (`-z lz4hc -C
65536`), small (`--preset small`), small-pieces (`--preset small --layout packed-pieces`), each
also as NAME-like: v2's image built `--like` v1's image of NAME (which the client holds).

PAIR is any of python, debian (default: both):
  python  a site-packages tree: the wheels of numpy, pandas, pyarrow and scipy (PyPI, `pip download
          --no-deps --only-binary=:all:`, for this Python and platform), each unpacked with `unzip`;
          v1 numpy 1.26.3, pandas 2.2.1, pyarrow 15.0.1, scipy 1.12.0; v2 the next release of each:
          numpy 1.26.4, pandas 2.2.2, pyarrow 15.0.2, scipy 1.13.0;
  debian  a Debian rootfs: v1 `debootstrap --variant=minbase bookworm` from deb.debian.org; v2 a copy
          of it after, in a chroot, adding bookworm-updates and bookworm-security, `apt-get upgrade`
          and `apt-get install --no-install-recommends` of a few packages (DEBIAN_PKGS); in both,
          apt's lists and package cache are removed afterwards (as Debian's container images do).

The trees are made once (on the host: they need the network), then the script runs itself in a
network namespace with bench/remote.py's link (nginx on 127.0.0.1 behind toxiproxy: 10 ms each way,
and a 1 Gbit/s HTB class on the namespace's loopback: see remote.py for why not netem). The server
(nginx's root) holds, per pair: v2's image for each build (default, `-z lz4hc -C 65536`,
`--preset small`), casync's index and chunk store of v2's tree (`casync make`, default chunking and
compression), v2's tree as a tar (GNU tar, `--sort=name`) and `zsyncmake` control files for that tar
and for each v2 image. The client holds v1: its images, its tree, its tar. Each round, interleaved,
page cache dropped first, the output removed:

  sealfs pull --base   `sealfs pull URL OUT --base V1.img --digest D --cache-dir EMPTY`
  casync               `casync extract --store=URL/store --seed=V1DIR URL/v2.caidx OUTDIR`
  zsync                `zsync -i V1-FILE -o OUT URL/FILE.zsync`, for the tar and for each image
  full download        `curl -o OUT URL` of each v2 image

Bytes fetched: nginx's access log ($body_bytes_sent of every request the tool made: casync's index
and zsync's control file included). Times: median (min-max) of RUNS rounds; bytes must be the same
in every round (the script stops if they are not). Every output is checked once: the pulled and
zsync'd files `cmp` equal to v2's, casync's tree `diff -r --no-dereference` equal to v2's tree.

The yardstick: the files that differ between v1 and v2 by content, as GNU `diff -rq
--no-dereference` lists them (changed, and every regular file under what only v2 has); their
raw size (stat), and the bytes `zstd -19` and `gzip -9` write for them, one frame or member per
file, counted by `wc -c` of their output.

Writes bench/results/delta-<stamp>.csv and prints Markdown tables for docs/benchmarks.md
(`bench/delta.py --report FILE.csv` prints them again from a results file).
"""
import csv
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import remote  # noqa: E402  (the link: Nginx, Link, drop_caches)

REPO = os.path.dirname(HERE)
RUNS = int(os.environ.get("RUNS", "3"))
SEALFS = os.environ.get("SEALFS", os.path.join(REPO, "target/release/sealfs"))
WORK = os.environ.get("WORK", "/var/tmp/sealfs-delta")
MIRROR = "http://deb.debian.org/debian"
WHEELS = {"v1": ["numpy==1.26.3", "pandas==2.2.1", "pyarrow==15.0.1", "scipy==1.12.0"],
          "v2": ["numpy==1.26.4", "pandas==2.2.2", "pyarrow==15.0.2", "scipy==1.13.0"]}
DEBIAN_PKGS = os.environ.get("DEBIAN_PKGS", "curl ca-certificates less openssh-client python3-minimal").split()
# The builds compared: name -> arguments. A name ending in "-like" is the build of the name before
# it, with v2 built `--like` v1's image of that build (the client's v1 image is that build's).
BUILDS = {"default": [], "lz4hc": ["-z", "lz4hc", "-C", "65536"], "small": ["--preset", "small"],
          "small-pieces": ["--preset", "small", "--layout", "packed-pieces"]}
LAYOUTS = [("default", []), ("lz4hc", BUILDS["lz4hc"]), ("small", BUILDS["small"])]


def set_layouts(names):
    """`--layouts a,b-like,...`: the builds compared (BUILDS' names, each optionally -like)."""
    global LAYOUTS
    LAYOUTS = []
    for n in names.split(","):
        base = n[:-len("-like")] if n.endswith("-like") else n
        if base not in BUILDS:
            sys.exit(f"delta.py: --layouts: unknown build {n!r} (one of {', '.join(BUILDS)}, each with -like)")
        LAYOUTS.append((n, BUILDS[base]))


def v1_name(name):
    """The build whose v1 image a build's update starts from."""
    return name[:-len("-like")] if name.endswith("-like") else name
sh = remote.sh


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- the trees (on the host) ----

def make_python(d):
    for v, reqs in WHEELS.items():
        tree = os.path.join(d, v)
        if os.path.isdir(tree):
            continue
        wheels = os.path.join(d, f"wheels-{v}")
        os.makedirs(wheels, exist_ok=True)
        sh(["pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", wheels, *reqs])
        tmp = tree + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for w in sorted(os.listdir(wheels)):
            sh(["unzip", "-q", "-o", os.path.join(wheels, w), "-d", tmp])
        os.rename(tmp, tree)


def chroot(root, *cmd):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
    sh(["mount", "-t", "proc", "proc", os.path.join(root, "proc")])
    try:
        return sh(["chroot", root, *cmd], env=env)
    finally:
        sh(["umount", os.path.join(root, "proc")])


def debian_clean(root):
    for sub in ("var/lib/apt/lists", "var/cache/apt"):
        p = os.path.join(root, sub)
        for name in os.listdir(p):
            q = os.path.join(p, name)
            if os.path.isdir(q) and not os.path.islink(q):
                if name not in ("partial", "archives"):
                    shutil.rmtree(q)
            elif name != "lock":
                os.unlink(q)
    arch = os.path.join(root, "var/cache/apt/archives")
    for name in os.listdir(arch):
        if name.endswith(".deb"):
            os.unlink(os.path.join(arch, name))


def make_debian(d):
    v1, v2 = os.path.join(d, "v1"), os.path.join(d, "v2")
    if not os.path.isdir(v1):
        tmp = v1 + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        sh(["debootstrap", "--variant=minbase", "bookworm", tmp, MIRROR])
        os.rename(tmp, v1)
    if not os.path.isdir(v2):
        tmp = v2 + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        sh(["cp", "-a", v1, tmp])
        with open(os.path.join(tmp, "etc/apt/sources.list"), "a") as f:
            f.write(f"deb {MIRROR} bookworm-updates main\n"
                    "deb http://deb.debian.org/debian-security bookworm-security main\n")
        chroot(tmp, "apt-get", "update", "-q")
        log(chroot(tmp, "apt-get", "-y", "-q", "upgrade"))
        log(chroot(tmp, "apt-get", "-y", "-q", "install", "--no-install-recommends", *DEBIAN_PKGS))
        debian_clean(tmp)
        os.rename(tmp, v2)
    debian_clean(v1)  # the same cleaning on both sides (idempotent)


def changed_files(v1, v2):
    """v2's regular files that v1 lacks or holds with other content, as GNU diff lists them."""
    r = subprocess.run(["diff", "-rq", "--no-dereference", v1, v2], stdout=subprocess.PIPE, text=True)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"diff -rq: exit {r.returncode}")
    out = []
    for line in r.stdout.splitlines():
        if line.startswith("Files ") and line.endswith(" differ"):
            p = line[len("Files "):-len(" differ")].split(" and " + v2 + "/", 1)[1]
            p = os.path.join(v2, p)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
        elif line.startswith("Only in " + v2):
            parent, name = line[len("Only in "):].split(": ", 1)
            p = os.path.join(parent, name)
            if os.path.isdir(p) and not os.path.islink(p):
                out += [os.path.join(r_, n) for r_, _, ns in os.walk(p) for n in ns
                        if os.path.isfile(os.path.join(r_, n)) and not os.path.islink(os.path.join(r_, n))]
            elif os.path.isfile(p) and not os.path.islink(p):
                out.append(p)
    return sorted(out)


def compressed_size(cmd, files):
    """Bytes `cmd` writes for `files` (one frame/member each), counted by `wc -c`."""
    total = 0
    for i in range(0, len(files), 500):
        p1 = subprocess.Popen(cmd + files[i:i + 500], stdout=subprocess.PIPE)
        total += int(subprocess.run(["wc", "-c"], stdin=p1.stdout, stdout=subprocess.PIPE, check=True).stdout)
        if p1.wait() != 0:
            raise RuntimeError(f"{cmd[0]}: exit {p1.returncode}")
    return total


def prepare(pair):
    """Makes v1 and v2 of `pair`, the client's and the server's files; returns the facts."""
    d = os.path.join(WORK, pair)
    os.makedirs(d, exist_ok=True)
    (make_python if pair == "python" else make_debian)(d)
    facts_path = os.path.join(d, "facts.json")
    # The images are made again by another sealfs binary (its layouts may differ).
    binary = hashlib.sha256(open(SEALFS, "rb").read()).hexdigest()
    if os.path.exists(facts_path):
        facts = json.load(open(facts_path))
        # Made for other --layouts, or by another binary: made again.
        if facts.get("sealfs") == binary and all(name in facts["digests"] for name, _ in LAYOUTS):
            return facts
    v1, v2 = os.path.join(d, "v1"), os.path.join(d, "v2")
    client, www = os.path.join(d, "client"), os.path.join(d, "www")
    shutil.rmtree(client, ignore_errors=True)
    shutil.rmtree(www, ignore_errors=True)
    os.makedirs(client)
    os.makedirs(www)
    facts = {"pair": pair, "digests": {}, "sizes": {}, "sealfs": binary}
    log(f"{pair}: yardstick")
    files = changed_files(v1, v2)
    facts["changed_files"] = len(files)
    facts["tree_files"] = sum(len(ns) for _, _, ns in os.walk(v2))
    facts["changed_raw"] = sum(os.path.getsize(f) for f in files)
    facts["changed_zstd19"] = compressed_size(["zstd", "-19", "-q", "-c", "--"], files)
    facts["changed_gzip9"] = compressed_size(["gzip", "-9", "-c", "--"], files)
    log(f"{pair}: images")
    for name, args in LAYOUTS:
        old = os.path.join(client, f"v1-{v1_name(name)}.img")
        if not os.path.exists(old):
            sh([SEALFS, "build", "-q", *args, v1, old])
        like = ["--like", old] if name.endswith("-like") else []
        facts["digests"][name] = sh([SEALFS, "build", "-q", *args, *like, v2,
                                     os.path.join(www, f"v2-{name}.img")]).strip()
        facts["sizes"][name] = os.path.getsize(os.path.join(www, f"v2-{name}.img"))
    for v, where in (("v1", client), ("v2", www)):
        sh(["tar", "--sort=name", "-C", os.path.join(d, v), "-cf", os.path.join(where, f"{v}.tar"), "."])
    facts["sizes"]["tar"] = os.path.getsize(os.path.join(www, "v2.tar"))
    log(f"{pair}: zsyncmake")
    for f in ["v2.tar"] + [f"v2-{n}.img" for n, _ in LAYOUTS]:
        sh(["zsyncmake", "-u", f, "-o", os.path.join(www, f + ".zsync"), os.path.join(www, f)], cwd=www)
    log(f"{pair}: casync make")
    sh(["casync", "make", "--store=" + os.path.join(www, "store"), os.path.join(www, "v2.caidx"), v2])
    facts["sizes"]["casync_store"] = int(sh(["du", "-sb", os.path.join(www, "store")]).split()[0])
    facts["sizes"]["casync_index"] = os.path.getsize(os.path.join(www, "v2.caidx"))
    json.dump(facts, open(facts_path, "w"), indent=1)
    return facts


# ---- the measurements (in the namespace) ----

def tools(pair, facts, url):
    d = os.path.join(WORK, pair)
    client, www = os.path.join(d, "client"), os.path.join(d, "www")
    out = os.path.join(d, "out")
    cache = os.path.join(d, "sealfs-cache")
    ts = []
    for name, _ in LAYOUTS:
        img = os.path.join(www, f"v2-{name}.img")
        ts.append((f"sealfs pull --base", name, lambda n=name: [
            SEALFS, "pull", "--json", "--digest", facts["digests"][n], "--cache-dir", cache,
            f"{url}/v2-{n}.img", out, "--base", os.path.join(client, f"v1-{v1_name(n)}.img")], ("cmp", img)))
    ts.append(("casync", "tree", lambda: [
        "casync", "extract", f"--store={url}/store", "--seed=" + os.path.join(d, "v1"), f"{url}/v2.caidx", out],
        ("diff", os.path.join(d, "v2"))))
    ts.append(("zsync", "tar", lambda: ["zsync", "-q", "-i", os.path.join(client, "v1.tar"), "-o", out,
                                        f"{url}/v2.tar.zsync"], ("cmp", os.path.join(www, "v2.tar"))))
    for name, _ in LAYOUTS:
        img = os.path.join(www, f"v2-{name}.img")
        ts.append(("zsync", name, lambda n=name: ["zsync", "-q", "-i", os.path.join(client, f"v1-{v1_name(n)}.img"), "-o",
                                                  out, f"{url}/v2-{n}.img.zsync"], ("cmp", img)))
    for name, _ in LAYOUTS:
        img = os.path.join(www, f"v2-{name}.img")
        ts.append(("full download", name, lambda n=name: ["curl", "-sSf", "-o", out, f"{url}/v2-{n}.img"],
                   ("cmp", img)))
    return ts, out, cache


def same_tree(a, b):
    """`diff -r --no-dereference` finds no difference (GNU diff does not compare device nodes and
    FIFOs; a line saying both sides are one of those, of the same kind, is no difference)."""
    r = subprocess.run(["diff", "-r", "--no-dereference", "-q", a, b], stdout=subprocess.PIPE, text=True)
    special = re.compile(r"^File .* is a (character special file|block special file|fifo|socket) "
                         r"while file .* is a \1$")
    left = [line for line in r.stdout.splitlines() if not special.match(line)]
    if r.returncode not in (0, 1) or left:
        raise RuntimeError(f"diff -r {a} {b}: exit {r.returncode}: " + "\n".join(left[:20]))


def clean(out, cache):
    for p in (out, os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".sealfs-part"),
              out + ".part", out + ".zs-old"):
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)


def measure(pairs):
    remote.sh(["ip", "link", "set", "lo", "up"])
    rows = []
    for pair in pairs:
        facts = json.load(open(os.path.join(WORK, pair, "facts.json")))
        work = tempfile.mkdtemp(prefix="sealfs-delta-nginx-")
        nginx = remote.Nginx(os.path.join(WORK, pair, "www"), work)
        link = None
        try:
            # remote.Link shapes lo with a root qdisc of its own: the previous pair's goes first.
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], stderr=subprocess.DEVNULL)
            link = remote.Link(nginx.port)
            ts, out, cache = tools(pair, facts, f"http://127.0.0.1:{link.port}")
            checked = set()
            for rnd in range(1, RUNS + 1):
                for tool, what, cmd in ((t[0], t[1], t[2]) for t in ts):
                    clean(out, cache)
                    remote.drop_caches()
                    before_lines = sum(1 for _ in open(nginx.log)) if os.path.exists(nginx.log) else 0
                    before = nginx.bytes_sent()
                    start = time.perf_counter()
                    res = subprocess.run(cmd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         cwd=os.path.join(WORK, pair))
                    secs = time.perf_counter() - start
                    time.sleep(0.2)  # nginx writes its log line after the last byte
                    fetched = nginx.bytes_sent() - before
                    requests = sum(1 for _ in open(nginx.log)) - before_lines
                    if res.returncode != 0:
                        raise RuntimeError(f"{tool} {what}: exit {res.returncode}: {res.stderr[-2000:]}")
                    check = next(t[3] for t in ts if t[0] == tool and t[1] == what)
                    if (tool, what) not in checked:
                        if check[0] == "cmp":
                            sh(["cmp", out, check[1]])
                        else:
                            same_tree(out, check[1])
                        checked.add((tool, what))
                    reported = ""
                    if tool.startswith("sealfs"):
                        j = json.loads(res.stdout)
                        reported = json.dumps(j, sort_keys=True)
                    rows.append((pair, rnd, tool, what, round(secs, 3), fetched, requests, reported))
                    log(f"{pair} round {rnd} {tool} {what}: {secs:.2f} s, {fetched:,} bytes in {requests} requests")
        finally:
            if link:
                link.stop()
            nginx.stop()
            clean(os.path.join(WORK, pair, "out"), os.path.join(WORK, pair, "sealfs-cache"))
            shutil.rmtree(work, ignore_errors=True)
    return rows


def report(pairs, rows, write=True):
    if write:
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        stamp = time.strftime("%Y-%m-%dT%H%M%SZ", time.gmtime())
        path = os.path.join(HERE, "results", f"delta-{stamp}.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["pair", "round", "tool", "artifact", "seconds", "bytes_fetched_nginx", "requests_nginx",
                        "sealfs_json"])
            w.writerows(rows)
        log(f"wrote {path}")
    for pair in pairs:
        facts = json.load(open(os.path.join(WORK, pair, "facts.json")))
        rs = [r for r in rows if r[0] == pair]
        casync = [r[5] for r in rs if r[2] == "casync"][0]
        print(f"\n{pair}: v2 {facts['tree_files']:,} files; {facts['changed_files']:,} changed or new: "
              f"{facts['changed_raw']:,} bytes raw, {facts['changed_zstd19']:,} with `zstd -19`, "
              f"{facts['changed_gzip9']:,} with `gzip -9`; v2 tar {facts['sizes']['tar']:,} bytes; casync store "
              f"{facts['sizes']['casync_store']:,} bytes, index {facts['sizes']['casync_index']:,}\n")
        print("| tool | v2 artifact (its size) | bytes fetched (nginx) | requests | × changed files' raw size "
              "| × their zstd -19 size | × casync's bytes | seconds, median (min-max) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for key in dict.fromkeys((r[2], r[3]) for r in rs):
            g = [r for r in rs if (r[2], r[3]) == key]
            b = {r[5] for r in g}
            if len(b) != 1:
                log(f"WARNING: {pair} {key}: bytes differ across rounds: {sorted(b)}")
            fetched = statistics.median(r[5] for r in g)
            secs = [r[4] for r in g]
            size = facts["sizes"].get(key[1])
            art = {"tree": "v2 tree (index + store)", "tar": "v2 tar"}.get(key[1], f"v2 image, {key[1]}")
            art += f" ({size:,})" if size else ""
            print(f"| {key[0]} | {art} | {int(fetched):,} | {statistics.median(r[6] for r in g):.0f} | "
                  f"{fetched / facts['changed_raw']:.2f} | {fetched / facts['changed_zstd19']:.2f} | {fetched / casync:.2f} | "
                  f"{statistics.median(secs):.2f} ({min(secs):.2f}-{max(secs):.2f}) |")


def main():
    if sys.argv[1:2] == ["--report"]:
        # The tables again from a results file (and the facts kept in WORK).
        rows = [(r[0], int(r[1]), r[2], r[3], float(r[4]), int(r[5]), int(r[6]), r[7])
                for r in list(csv.reader(open(sys.argv[2])))[1:]]
        report(list(dict.fromkeys(r[0] for r in rows)), rows, write=False)
        return
    args = sys.argv[1:]
    if args[:1] == ["--layouts"] and len(args) > 1:
        set_layouts(args[1])
        args = args[2:]
    pairs = args or ["python", "debian"]
    if os.geteuid() != 0:
        sys.exit("delta.py: run as root (debootstrap, chroot, drop_caches, tc)")
    if os.environ.get("SEALFS_REMOTE_BENCH_NETNS") == "1":
        rows = measure(pairs)
        report(pairs, rows)
        return
    for tool in ("nginx", "casync", "zsync", "zsyncmake", "debootstrap", "zstd", "curl", "unzip"):
        if not shutil.which(tool):
            sys.exit(f"delta.py: {tool} not found (apt install casync zsync debootstrap nginx zstd curl unzip)")
    if not os.access(remote.TOXIPROXY, os.X_OK):
        sys.exit(f"delta.py: no toxiproxy at {remote.TOXIPROXY} (scripts/build-oracles.sh toxiproxy builds it)")
    for pair in pairs:
        prepare(pair)
    env = dict(os.environ, SEALFS_REMOTE_BENCH_NETNS="1")
    layouts = ["--layouts", ",".join(n for n, _ in LAYOUTS)]
    os.execvpe("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__)] + layouts + pairs, env)


if __name__ == "__main__":
    main()
