"""A damaged block fails the reads that touch it, with ``OSError(EIO)`` naming the block and the
file, and nothing else: the file's other blocks and every other file read back intact, locally
and over HTTP, plain and compressed. The block is found by searching the image's bytes for the
victim's content (random data is stored as it is, even by a compressed build), not by sealfs."""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path

import pytest

import sealfs
from conftest import HTTP, WWW, build_cli

BLOCK = 4096


def make_tree(root: Path) -> dict:
    rng = random.Random(31)
    files = {
        "victim.bin": rng.randbytes(64 * BLOCK),
        "neighbour.bin": rng.randbytes(16 * BLOCK + 100),
        "small.txt": b"small file\n" * 10,
        "dir/deeper.bin": rng.randbytes(3 * BLOCK + 7),
    }
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def damage(image: Path, out: Path, needle: bytes) -> int:
    """Copies ``image`` to ``out`` with one byte of the block holding ``needle`` flipped; returns
    that byte's offset."""
    data = bytearray(image.read_bytes())
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0, "the victim's block is in the image once"
    data[at + 1000] ^= 0x40
    out.write_bytes(bytes(data))
    return at + 1000


@pytest.mark.parametrize("build_args", [[], ["-z", "lz4hc", "-C", "65536"]], ids=["plain", "lz4hc"])
def test_a_damaged_block_fails_that_read_only(tmp_path, build_args):
    src = tmp_path / "src"
    files = make_tree(src)
    image = tmp_path / "good.img"
    digest = build_cli(src, image, *build_args)
    victim = files["victim.bin"]
    # Block 10 of the victim: its bytes are in the image as they are.
    needle = victim[10 * BLOCK : 11 * BLOCK]
    name = "damaged-" + ("z" if build_args else "plain") + ".img"
    bad = WWW / name
    offset = damage(image, bad, needle)

    for location in (str(bad), HTTP + name):
        img = sealfs.open(location, digest=digest, cache=False)
        with pytest.raises(OSError) as caught:
            img.read_bytes("/victim.bin")
        e = caught.value
        assert e.errno == errno.EIO, e
        assert isinstance(e, sealfs.VerificationError)
        assert e.filename == "/victim.bin"
        assert "verification failed" in str(e) and "offset" in str(e), str(e)
        # The image offset of the damaged Merkle block is named.
        assert hex(offset // BLOCK * BLOCK) in str(e), (str(e), hex(offset))
        # The same file's other blocks, and every other file, read back.
        with img.open("/victim.bin") as f:
            assert f.pread(10 * BLOCK, 0) == victim[: 10 * BLOCK]
            assert f.pread(BLOCK, 11 * BLOCK) == victim[11 * BLOCK : 12 * BLOCK]
            with pytest.raises(sealfs.VerificationError):
                f.pread(1, 10 * BLOCK + 5)
            # readinto: the bytes before the damaged block, then EIO for it, the position kept.
            buf = bytearray(3 * BLOCK)
            f.seek(7 * BLOCK)
            assert f.readinto(buf) == 3 * BLOCK and bytes(buf) == victim[7 * BLOCK : 10 * BLOCK]
            with pytest.raises(OSError) as caught:
                f.readinto(buf)
            assert caught.value.errno == errno.EIO and f.tell() == 10 * BLOCK
            # A read of many blocks across the damage fails too (whatever runs it is split into).
            f.seek(0)
            with pytest.raises(sealfs.VerificationError):
                f.read()
        for other, data in files.items():
            if other != "victim.bin":
                assert img.read_bytes(other) == data, other
        assert img.stats["verification_failures"] > 0

    # verify() reports the block and names the file that owns it.
    report = sealfs.verify(bad, digest=digest)
    assert not report["verified"]
    blocks = [p for p in report["problems"] if p["kind"] == "data_block"]
    assert blocks and blocks[0]["offset"] == offset // BLOCK * BLOCK, report
    assert "/victim.bin" in (blocks[0]["owner"] or ""), report
    # Unverified reading (asked for by name) returns the damaged bytes.
    raw = sealfs.open(bad, verify="none").read_bytes("/victim.bin")
    assert raw != victim and len(raw) == len(victim)
    os.unlink(bad)
    shutil.rmtree(src)
