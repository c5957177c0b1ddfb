#!/usr/bin/env python3
"""Runs the workspace's tests two programs at a time.

`cargo test` runs its test programs one after another, and ours spend much of their time waiting (for
mounts, FUSE round trips, QEMU guests, servers) with one core idle. This builds them with
`cargo test --no-run` (the same flags as `cargo test`), then runs each program the way cargo does (in
its package's directory, with `--test-threads=1`), JOBS at a time, the longest first; extra commands
given with `--also` join the same queue. Each program's output is printed whole when it ends, then a
summary of times; the doc tests run last, through cargo. Exit status 1 if anything failed.

Usage: scripts/run-tests.py [--jobs N] [--also NAME='COMMAND' ...] [-- CARGO-TEST-ARGS...]
"""

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

# Seconds each program took in a CI run (2 cores), to start the longest first; others count as short.
WEIGHTS = {
    "pytest": 600,
    "c_library": 150,
    "fuse_mount": 110,
    "mkfs_1_9_images": 90,
    "kernel_oracle": 80,
    "fuzz": 120,
    "compressed": 60,
    "codec_matrix": 60,
    "fragments": 50,
    "remote": 45,
    "kernel_verity": 40,
    "snapshotter_kernel": 70,
    "read_commands": 40,
}
# A program still running after this long is stopped and counted as failed.
TIMEOUT = 20 * 60
TAIL_LINES = 40  # of each failed program's output, printed again after the summary


def build(cargo_args):
    """Builds the test programs; returns (name, directory, argv) for each."""
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    jobs = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        pkg = os.path.basename(os.path.dirname(msg["manifest_path"]))
        kind = "lib" if "lib" in target["kind"] else target["name"]
        jobs.append(
            (f"{pkg}/{kind}", target["name"], os.path.dirname(msg["manifest_path"]),
             [msg["executable"], "--test-threads=1"])
        )
    return jobs


def run_one(job, results, lock):
    label, _, cwd, argv = job
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    timer = threading.Timer(TIMEOUT, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    out, _ = proc.communicate()
    timer.cancel()
    secs = time.monotonic() - start
    with lock:
        status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        if proc.returncode == -signal.SIGKILL:
            status = f"FAILED (stopped after {TIMEOUT} s)"
        sys.stdout.write(f"\n==== {label}: {status}, {secs:.1f} s: {shlex.join(argv)}\n")
        sys.stdout.flush()
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        results.append((label, secs, proc.returncode == 0, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--also", action="append", default=[], metavar="NAME=COMMAND",
                    help="a shell command to run as one more job")
    ap.add_argument("cargo_args", nargs="*")
    args = ap.parse_args()
    jobs = build(args.cargo_args)
    for also in args.also:
        name, _, cmd = also.partition("=")
        jobs.append((name, name, os.getcwd(), ["bash", "-c", cmd]))
    jobs.sort(key=lambda j: -WEIGHTS.get(j[1], 0))
    results, lock = [], threading.Lock()
    queue = list(jobs)
    qlock = threading.Lock()

    def worker():
        while True:
            with qlock:
                if not queue:
                    return
                job = queue.pop(0)
            run_one(job, results, lock)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start

    print("\n==== doc tests", flush=True)
    doc = subprocess.run(["cargo", "test", "--doc", *args.cargo_args])
    results.append(("doc tests", 0.0, doc.returncode == 0, b""))

    print(f"\n==== {len(jobs)} programs in {wall:.0f} s with {args.jobs} at a time:")
    for label, secs, ok, _ in sorted(results, key=lambda r: -r[1]):
        print(f"  {secs:7.1f} s  {'ok    ' if ok else 'FAILED'}  {label}")
    failed = [label for label, _, ok, _ in results if not ok]
    # A log is often read from its end: each failure's last lines again, after the summary.
    for label, _, ok, out in results:
        if not ok and out:
            tail = out.decode(errors="replace").splitlines()[-TAIL_LINES:]
            print(f"\n==== the end of {label}'s output:")
            print("\n".join(tail))
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
