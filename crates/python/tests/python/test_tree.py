"""Every path of the fixture tree, read through the Python API from each image (local plain and
lz4hc, over nginx, over S3), equals the source as ``os`` reads it: type, mode, owner, times,
link count, size, device numbers, symlink target, xattrs, directory listings and their entries'
types and inode numbers, hard-link identity, and every byte of every file."""

from __future__ import annotations

import io
import os
import stat
from collections import Counter, defaultdict
from typing import Dict, List

import pytest

import sealfs
from conftest import FULL, IMAGES, SRC, Entry, open_spec

CHUNK = 8 << 20


def expected_nlinks(tree: Dict[bytes, Entry]) -> Dict[bytes, int]:
    """A directory: 2 and one per subdirectory; anything else: its names in the tree."""
    names = Counter((e.st.st_dev, e.st.st_ino) for e in tree.values())
    out = {}
    for rel, e in tree.items():
        if stat.S_ISDIR(e.st.st_mode):
            base = b"" if rel == b"/" else rel
            out[rel] = 2 + sum(
                1 for n in e.children or [] if stat.S_ISDIR(tree[base + b"/" + n].st.st_mode)
            )
        else:
            out[rel] = names[(e.st.st_dev, e.st.st_ino)]
    return out


def compare_content(img: sealfs.Image, e: Entry, how: int) -> List[str]:
    """The bytes of regular file ``e`` read from the image (three ways, by ``how``) against the
    source's."""
    size = e.st.st_size
    if how == 0 and size <= CHUNK:
        data = img.read_bytes(e.rel)
        with open(e.path, "rb") as f:
            want = f.read()
        return [] if data == want else [f"{e.rel!r}: read_bytes differs"]
    problems = []
    with img.open(e.rel) as f, open(e.path, "rb") as src:
        assert isinstance(f, io.RawIOBase) and f.seekable() and f.readable()
        buf = bytearray(CHUNK)
        off = 0
        while off < size:
            if how == 1:
                n = f.readinto(buf)
                got = memoryview(buf)[:n]
            else:
                got = f.read(CHUNK)
                n = len(got)
            want = src.read(CHUNK)
            if n == 0 or got != want:
                problems.append(f"{e.rel!r}: content differs in the {CHUNK}-byte piece at {off}")
                break
            off += n
        if f.read(1) != b"":
            problems.append(f"{e.rel!r}: data after the end")
    return problems


@pytest.mark.parametrize("spec", IMAGES, ids=[i["name"] for i in IMAGES])
def test_every_path_equals_the_source(spec, tree):
    img = open_spec(spec)
    assert img.trust.authenticated, img.trust
    problems: List[str] = []
    ino_of: Dict[bytes, int] = {}
    nlinks = expected_nlinks(tree)
    for rel, e in tree.items():
        want = e.st
        try:
            got = img.lstat(rel)
        except OSError as err:
            problems.append(f"{rel!r}: lstat: {err}")
            continue
        assert isinstance(got, os.stat_result)
        ino_of[rel] = got.st_ino
        if stat.S_IFMT(got.st_mode) != stat.S_IFMT(want.st_mode):
            problems.append(f"{rel!r}: type {got.st_mode:o}, source {want.st_mode:o}")
            continue
        for field in ("st_mode", "st_uid", "st_gid", "st_mtime_ns"):
            if getattr(got, field) != getattr(want, field):
                problems.append(f"{rel!r}: {field} {getattr(got, field)}, source {getattr(want, field)}")
        if got.st_nlink != nlinks[rel]:
            problems.append(f"{rel!r}: st_nlink {got.st_nlink}, expected {nlinks[rel]}")
        if not stat.S_ISDIR(want.st_mode) and got.st_size != want.st_size:
            problems.append(f"{rel!r}: size {got.st_size}, source {want.st_size}")
        if (stat.S_ISCHR(want.st_mode) or stat.S_ISBLK(want.st_mode)) and got.st_rdev != want.st_rdev:
            problems.append(f"{rel!r}: rdev {got.st_rdev:#x}, source {want.st_rdev:#x}")
        if e.target is not None and img.readlink(rel) != e.target:
            problems.append(f"{rel!r}: symlink target {img.readlink(rel)!r}, source {e.target!r}")
        names = img.listxattr(rel, follow_symlinks=False)
        got_x = {os.fsencode(n): img.getxattr(rel, n, follow_symlinks=False) for n in names}
        if got_x != e.xattrs:
            problems.append(
                f"{rel!r}: xattrs {sorted(got_x)}, source {sorted(e.xattrs)}"
                + ("" if set(got_x) != set(e.xattrs) else " (values differ)")
            )
        if e.children is not None:
            listed = img.listdir(rel)
            if sorted(listed) != e.children:
                problems.append(f"{rel!r}: listdir differs from the source's")
            for d in img.scandir(rel):
                child = tree.get(d.path)
                if child is None:
                    continue
                m = child.st.st_mode
                if (d.is_dir(follow_symlinks=False), d.is_file(follow_symlinks=False), d.is_symlink()) != (
                    stat.S_ISDIR(m), stat.S_ISREG(m), stat.S_ISLNK(m)
                ):
                    problems.append(f"{d.path!r}: the entry's type is not the file's")
                if d.inode() != img.lstat(d.path).st_ino:
                    problems.append(f"{d.path!r}: the entry's inode is not the file's")
        if len(problems) > 50:
            break
    # Hard links: two paths are one inode in the image exactly when they are in the source.
    groups_src, groups_img = defaultdict(set), defaultdict(set)
    for rel, e in tree.items():
        if not stat.S_ISDIR(e.st.st_mode) and rel in ino_of:
            groups_src[(e.st.st_dev, e.st.st_ino)].add(rel)
            groups_img[ino_of[rel]].add(rel)
    if sorted(map(sorted, groups_src.values())) != sorted(map(sorted, groups_img.values())):
        problems.append("hard-link groups differ")
    assert not problems, "\n".join(problems[:50])


@pytest.mark.parametrize("spec", IMAGES, ids=[i["name"] for i in IMAGES])
def test_every_file_reads_back(spec, tree):
    img = open_spec(spec)
    problems: List[str] = []
    files = sorted(rel for rel, e in tree.items() if stat.S_ISREG(e.st.st_mode))
    assert files
    for i, rel in enumerate(files):
        problems.extend(compare_content(img, tree[rel], i % 3))
    assert not problems, "\n".join(problems[:50])
    # Every read was checked (or, for a kernel-verified file, by the kernel).
    st = img.stats
    if img.trust.checker == "reader":
        assert st["verified_blocks"] > 0, st
    assert st["verification_failures"] == 0, st


def test_the_tree_is_the_full_fixture_as_root():
    """The full fixture (devices, owners, every xattr namespace) as root, where CI runs."""
    if os.geteuid() == 0:
        assert FULL
        assert (SRC / "files" / "sparse5g").exists()
