"""One ``Image`` shared by 8 threads, inherited by forked workers (while other threads of the
parent are reading, and for a remote image whose source runs its own threads), and pickled to
spawned workers: every file reads back as the source has it. And the GIL is released while the
library works: another thread keeps running during a long read, a walk and a build."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

import pytest

import sealfs
import workers
from conftest import image_by_name, open_spec, regular_files

LIMIT = 4 << 20


@pytest.fixture(scope="module")
def expected(tree) -> Dict[bytes, str]:
    """The SHA-256 of every regular file of at most 4 MiB, from the source."""
    out = {}
    for rel in regular_files(tree, LIMIT):
        with open(tree[rel].path, "rb") as f:
            out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def shuffled(paths: List[bytes], seed: int) -> List[bytes]:
    p = list(paths)
    random.Random(seed).shuffle(p)
    return p


@pytest.mark.parametrize("name", ["local-lz4hc", "http-lz4hc"])
def test_eight_threads_share_one_image(name, expected):
    img = open_spec(image_by_name(name))
    workers.IMAGE = img
    paths = sorted(expected)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(workers.read_files, [shuffled(paths, s) for s in range(8)]))
    for r in results:
        assert r == expected
    # One file object, read at offsets by 8 threads.
    big = max(paths, key=lambda p: img.stat(p).st_size)
    whole = img.read_bytes(big)
    with img.open(big) as f:

        def pieces(seed: int) -> bool:
            rng = random.Random(seed)
            for _ in range(200):
                off = rng.randrange(0, len(whole))
                n = rng.randrange(1, 70000)
                if f.pread(n, off) != whole[off : off + n]:
                    return False
            return True

        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(pieces, range(8)))


def chunks(paths: List[bytes], n: int) -> List[List[bytes]]:
    return [paths[i::n] for i in range(n)]


@pytest.mark.parametrize("name", ["local-lz4hc", "http-lz4hc", "s3-lz4hc"])
def test_forked_workers_read_the_image_their_parent_opened(name, expected):
    img = open_spec(image_by_name(name))
    paths = sorted(expected)
    # The parent has read (caches filled, a remote source's threads and readahead running) and
    # goes on reading on other threads while it forks.
    workers.IMAGE = img
    assert workers.read_files(paths[:20]) == {p: expected[p] for p in paths[:20]}
    stop = threading.Event()

    def keep_reading(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            p = rng.choice(paths)
            assert workers.read_files([p])[p] == expected[p]

    busy = [threading.Thread(target=keep_reading, args=(s,)) for s in range(4)]
    for t in busy:
        t.start()
    try:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(4) as pool:
            results = pool.map(workers.read_files, chunks(shuffled(paths, 1), 8))
            trust = pool.apply(workers.digest_and_trust)
    finally:
        stop.set()
        for t in busy:
            t.join()
    merged: Dict[bytes, str] = {}
    for r in results:
        merged.update(r)
    assert merged == expected
    assert trust == (img.digest, img.trust.state)
    # A plain fork, outside multiprocessing: the child reads and exits with what it found.
    pid = os.fork()
    if pid == 0:
        ok = workers.read_files(paths[-10:]) == {p: expected[p] for p in paths[-10:]}
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent still reads.
    assert workers.read_files(paths[:5]) == {p: expected[p] for p in paths[:5]}


@pytest.mark.parametrize("name", ["local-plain", "http-lz4hc"])
def test_spawned_workers_get_the_image_pickled(name, expected):
    img = open_spec(image_by_name(name))
    paths = sorted(expected)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2, initializer=workers.use, initargs=(img,)) as pool:
        results = pool.map(workers.read_files, chunks(paths, 4))
        trust = pool.apply(workers.digest_and_trust)
    merged: Dict[bytes, str] = {}
    for r in results:
        merged.update(r)
    assert merged == expected
    assert trust == (img.digest, img.trust.state)


def longest_pause(call) -> tuple:
    """Runs ``call`` on another thread while this one counts time in a loop: returns how long the
    call took and the longest this thread could not run meanwhile (all of the call, if the call
    held the GIL)."""
    took = []

    def run() -> None:
        t0 = time.monotonic()
        call()
        took.append(time.monotonic() - t0)

    t = threading.Thread(target=run)
    longest = 0.0
    last = time.monotonic()
    t.start()
    while t.is_alive():
        now = time.monotonic()
        longest = max(longest, now - last)
        last = now
    t.join()
    return took[0], longest


def test_the_gil_is_released_while_the_library_works(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(96 << 20))
    image = tmp_path / "big.img"
    built = {}
    took, pause = longest_pause(lambda: built.update(sealfs.build(src, image, compression="zstd")))
    assert took > 0.05 and pause < took / 2, ("build", took, pause)
    img = sealfs.open(image, digest=built["digest"])
    took, pause = longest_pause(lambda: img.read_bytes("/big"))
    assert took > 0.05 and pause < took / 2, ("read", took, pause)
    # A remote walk is short (tens of ms, part of it the result's conversion, which needs the
    # GIL), so one run's longest pause may be the scheduler's on 2 busy cores: the best of three
    # (a walk that held the GIL throughout pauses this thread for all of every run).
    remote = open_spec(image_by_name("http-plain"), cache=False)
    runs = [longest_pause(lambda: remote._native.walk(b"/")) for _ in range(3)]
    took, pause = min(runs, key=lambda r: r[1] / r[0])
    assert took > 0.02 and pause < took / 2, ("walk", runs)
