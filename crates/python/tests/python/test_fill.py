"""Issue 38, item 19: a process that reads a few files of a remote image through the default
cache, and exits, fetches those files, not the whole image (the background fill was on, ``auto``,
with no way to turn it off: 448 MB fetched for 2.9 MB read). ``fill=`` chooses; ``"off"`` is the
default. What was fetched is counted by nginx (the bytes of every response in its access log),
never by sealfs."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

import pytest

import sealfs
from conftest import HTTP, WORK, WWW

FILES = 400
FILE_BYTES = 16 * 1024
BIG_BYTES = 24 << 20
READ = 40


@pytest.fixture(scope="module")
def image() -> Path:
    """An image of 400 small files and one big one, nobody reads the big one."""
    rng = random.Random(38)
    tree = WORK / "fill-tree"
    (tree / "small").mkdir(parents=True, exist_ok=True)
    for i in range(FILES):
        (tree / "small" / f"{i:04}").write_bytes(rng.randbytes(FILE_BYTES))
    (tree / "big").write_bytes(rng.randbytes(BIG_BYTES))
    out = WORK / "fill.img"
    sealfs.build(tree, out)
    return out


def _served_bytes(name: str) -> int:
    """The body bytes nginx sent for ``/name`` (its access log: METHOD URI RANGE STATUS BYTES)."""
    total = 0
    for line in (WORK / "nginx" / "access.log").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "/" + name:
            total += int(fields[-1])
    return total


def _run(image: Path, name: str, fill: Optional[str]) -> int:
    """Serves a copy of the image as ``name``, has a fresh Python process read 40 of its small
    files scattered (through a cache of its own) and then work 3 s more before exiting; returns
    the bytes nginx sent."""
    (WWW / name).write_bytes(image.read_bytes())
    digest = sealfs.digest(image)
    arg = "" if fill is None else f", fill={fill!r}"
    code = textwrap.dedent(
        f"""
        import random, time, sealfs
        img = sealfs.open({HTTP + name!r}, digest={digest!r}, cache_dir={str(WORK / ('cache-' + name))!r}{arg})
        for i in random.Random(1).sample(range({FILES}), {READ}):
            assert len(img.read_bytes(f"/small/{{i:04}}")) == {FILE_BYTES}
        time.sleep(3)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    time.sleep(0.2)  # nginx writes the log line when the response ends
    return _served_bytes(name)


def test_a_short_process_fetches_what_it_reads_not_the_whole_image(image):
    size = image.stat().st_size
    read = READ * FILE_BYTES
    default = _run(image, "fill-default.img", None)
    off = _run(image, "fill-off.img", "off")
    auto = _run(image, "fill-auto.img", "auto")
    on = _run(image, "fill-on.img", "on")
    print(f"image {size} B, read {read} B; fetched: default {default}, off {off}, auto {auto}, on {on}")
    # Reads fetch at least 16 blocks (64 KiB) per miss, with the metadata, tail and hash blocks.
    assert default < size // 4, f"the default fetched {default} of {size} bytes"
    assert off < size // 4, f"fill='off' fetched {off} of {size} bytes"
    # The scattered reads start the fill with "auto"; "on" starts it at once.
    assert auto >= size * 9 // 10, f"fill='auto' fetched {auto} of {size} bytes"
    assert on >= size * 9 // 10, f"fill='on' fetched {on} of {size} bytes"


def test_fill_takes_off_auto_or_on():
    with pytest.raises(ValueError, match="fill"):
        sealfs.open(HTTP + "plain.img", self_consistent=True, fill="always")  # type: ignore[arg-type]
