"""``Image.mount``: the image mounted over FUSE by the library's in-process mount, served by
threads of this process. The mounted tree is compared with the source by the operating system
(``os.walk``, ``os.lstat``, GNU ``diff -r`` and ``filecmp``), never by sealfs's reader; a damaged
data block fails the reads of that file only (``EIO`` through the kernel); ``unmount`` takes the
mount out of ``/proc/mounts`` and leaves the mount point empty. Needs root and /dev/fuse."""

from __future__ import annotations

import errno
import filecmp
import gc
import os
import random
import stat
import subprocess
from pathlib import Path

import pytest

import sealfs
from conftest import build_cli, ci

BLOCK = 4096


def need_fuse() -> None:
    why = None
    if os.geteuid() != 0:
        why = "mounting needs root here"
    elif not os.path.exists("/dev/fuse"):
        why = "/dev/fuse missing (no FUSE)"
    if why:
        if ci():
            pytest.fail(f"{why}, and CI=true forbids skipping")
        pytest.skip(why)


def make_tree(root: Path) -> dict:
    rng = random.Random(39)
    files = {
        "victim.bin": rng.randbytes(64 * BLOCK),
        "neighbour.bin": rng.randbytes(300 * BLOCK + 100),
        "small.txt": b"small file\n" * 10,
        "empty": b"",
        "dir/deeper.bin": rng.randbytes(3 * BLOCK + 7),
        "dir/sub/text.txt": b"".join(b"line %d\n" % i for i in range(5000)),
    }
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    os.symlink("dir/sub/text.txt", root / "link")
    os.chmod(root / "small.txt", 0o640)
    os.chmod(root / "dir/sub", 0o711)
    return files


def mounted(mountpoint: str) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mountpoint for line in f)


def same_tree(src: Path, mnt: str) -> None:
    """The mount shows the source tree: GNU diff finds no difference, and every path has the
    source's type, mode, size and owner, as ``os.lstat`` shows them."""
    out = subprocess.run(["diff", "-r", "--no-dereference", str(src), mnt], capture_output=True)
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
    seen = 0
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        there = os.path.join(mnt, rel)
        assert sorted(os.listdir(there)) == sorted(dirnames + filenames), rel
        for name in dirnames + filenames:
            a, b = os.lstat(os.path.join(dirpath, name)), os.lstat(os.path.join(there, name))
            # A directory's size is its file system's (EROFS packs entries), not the tree's.
            size = not stat.S_ISDIR(a.st_mode)
            assert (a.st_mode, a.st_uid, a.st_gid) == (b.st_mode, b.st_uid, b.st_gid), name
            assert not size or a.st_size == b.st_size, os.path.join(rel, name)
            if stat.S_ISREG(a.st_mode):
                assert filecmp.cmp(os.path.join(dirpath, name), os.path.join(there, name), shallow=False)
            seen += 1
    assert seen >= 9


@pytest.mark.parametrize("build_args", [[], ["-z", "lz4hc", "-C", "65536"]], ids=["plain", "lz4hc"])
def test_a_mounted_image_is_the_source_tree(tmp_path, build_args):
    need_fuse()
    src = tmp_path / "src"
    make_tree(src)
    image = tmp_path / "tree.img"
    digest = build_cli(src, image, *build_args)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    img = sealfs.open(image, digest=digest)
    with img.mount(mnt, options="nodev,nosuid", threads=2) as m:
        assert isinstance(m, sealfs.Mount)
        assert m.mountpoint == str(mnt) and m.mounted
        assert mounted(str(mnt))
        # The image may be closed: the mount opened it for itself.
        img.close()
        same_tree(src, str(mnt))
        stats = m.stats()
        assert digest in stats["trust"], stats
        assert "fuse.sealfs" in Path("/proc/mounts").read_text()
    assert not m.mounted
    assert not mounted(str(mnt))
    assert os.listdir(mnt) == []
    # Unmounting again does nothing; the mount point takes a new mount at once.
    m.unmount()
    with sealfs.open(image, digest=digest).mount(mnt) as again:
        assert filecmp.cmp(src / "small.txt", mnt / "small.txt", shallow=False)
    assert not again.mounted and os.listdir(mnt) == []


def test_a_damaged_block_fails_that_file_only_through_the_mount(tmp_path):
    need_fuse()
    src = tmp_path / "src"
    files = make_tree(src)
    good = tmp_path / "good.img"
    digest = build_cli(src, good)
    # Block 10 of the victim, found by its bytes (a plain build stores them as they are).
    data = bytearray(good.read_bytes())
    needle = files["victim.bin"][10 * BLOCK : 11 * BLOCK]
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0
    data[at + 1000] ^= 0x40
    bad = tmp_path / "bad.img"
    bad.write_bytes(bytes(data))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    with sealfs.open(bad, digest=digest).mount(mnt, log=log) as m:
        victim = mnt / "victim.bin"
        with open(victim, "rb") as f:
            assert f.read(10 * BLOCK) == files["victim.bin"][: 10 * BLOCK]
        with pytest.raises(OSError) as caught:
            victim.read_bytes()
        assert caught.value.errno == errno.EIO
        # Every other file reads back as the source has it.
        for name in files:
            if name != "victim.bin":
                assert filecmp.cmp(src / name, mnt / name, shallow=False), name
        stats = m.stats()
        assert stats["fuse"]["verification_errors"] >= 1 and stats["verify"]["failures"] >= 1, stats
    assert "victim.bin" in log.read_text()


def test_unmount_with_a_file_open_detaches_and_collection_unmounts(tmp_path):
    need_fuse()
    src = tmp_path / "src"
    make_tree(src)
    image = tmp_path / "tree.img"
    digest = build_cli(src, image)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    img = sealfs.open(image, digest=digest)
    m = img.mount(mnt)
    f = open(mnt / "neighbour.bin", "rb")
    # Busy: detached lazily, at once; the open file still reads.
    m.unmount()
    assert not mounted(str(mnt)) and os.listdir(mnt) == []
    assert f.read() == (src / "neighbour.bin").read_bytes()
    f.close()
    # A Mount collected while mounted is detached.
    img.mount(mnt)
    gc.collect()
    assert not mounted(str(mnt)) and os.listdir(mnt) == []
    # Refusals: not a directory, -o rw, an unknown option.
    with pytest.raises(NotADirectoryError):
        img.mount(image)
    with pytest.raises(ValueError, match="read-only"):
        img.mount(mnt, options="rw")
    with pytest.raises(ValueError, match="bogus"):
        img.mount(mnt, options=["nodev", "bogus"])
    assert not mounted(str(mnt))
