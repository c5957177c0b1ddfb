"""What the suite reads, prepared by tests/pytest.rs (see there): the source tree, the images of it
(local, over nginx, over S3) and what vouches for each, the sealfs binary, a signing key.

Expected values always come from the source tree as Python's ``os`` reads it (``lstat``,
``readlink``, ``listxattr``, the bytes of each file), never from sealfs.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

import sealfs

ENV = os.environ


def need(name: str) -> str:
    value = ENV.get(name)
    if value is None:
        pytest.fail(f"{name} is not set: run this suite through tests/pytest.rs")
    return value


SRC = Path(need("SEALFS_TEST_SRC"))
FULL = ENV.get("SEALFS_TEST_FULL") == "1"
WORK = Path(need("SEALFS_TEST_WORK"))
WWW = Path(need("SEALFS_TEST_WWW"))
HTTP = need("SEALFS_TEST_HTTP")
SEALFS_BIN = need("SEALFS_BIN")
KEY = need("SEALFS_TEST_KEY")
KEY_PUB = need("SEALFS_TEST_KEY_PUB")
IMAGES: List[Dict[str, str]] = json.loads(need("SEALFS_TEST_IMAGES"))


def ci() -> bool:
    return ENV.get("CI") == "true"


def image_by_name(name: str) -> Dict[str, str]:
    for spec in IMAGES:
        if spec["name"] == name:
            return spec
    if ci():
        pytest.fail(f"image {name} missing, and CI=true forbids skipping")
    pytest.skip(f"image {name} is not served here")


def open_spec(spec: Dict[str, str], **extra: Any) -> sealfs.Image:
    """Opens one of the images as its spec says (a digest or a key), with a cache of its own."""
    kwargs: Dict[str, Any] = {}
    if "digest" in spec:
        kwargs["digest"] = spec["digest"]
    if "key" in spec:
        kwargs["key"] = spec["key"]
    kwargs["cache_dir"] = str(WORK / "cache" / spec["name"])
    kwargs.update(extra)
    return sealfs.open(spec["location"], **kwargs)


def sealfs_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the sealfs binary."""
    return subprocess.run(
        [SEALFS_BIN, *args], capture_output=True, check=check, env={**ENV, "SOURCE_DATE_EPOCH": ""}
    )


def build_cli(src: Path, out: Path, *args: str) -> str:
    """``sealfs build ARGS SRC OUT``; the digest it printed."""
    return sealfs_cli("build", *args, str(src), str(out)).stdout.decode().strip()


class Entry:
    """One path of the source tree, as ``os`` sees it."""

    __slots__ = ("rel", "path", "st", "target", "xattrs", "children")

    def __init__(self, rel: bytes, path: bytes):
        self.rel = rel
        self.path = path
        self.st = os.lstat(path)
        self.target: Optional[bytes] = os.readlink(path) if stat.S_ISLNK(self.st.st_mode) else None
        names = os.listxattr(path, follow_symlinks=False)
        self.xattrs = {
            os.fsencode(n): os.getxattr(path, n, follow_symlinks=False) for n in names
        }
        self.children: Optional[List[bytes]] = None


def scan(root: Path) -> Dict[bytes, Entry]:
    """Every path below ``root`` (``b"/"`` for the root, ``b"/a/b"`` below it), symlinks not
    followed."""
    out: Dict[bytes, Entry] = {}
    top = os.fsencode(root)
    stack = [b"/"]
    while stack:
        rel = stack.pop()
        path = top if rel == b"/" else top + rel
        e = Entry(rel, path)
        out[rel] = e
        if stat.S_ISDIR(e.st.st_mode):
            names = sorted(os.listdir(path))
            e.children = names
            for n in names:
                stack.append((b"" if rel == b"/" else rel) + b"/" + n)
    return out


_TREE: Optional[Dict[bytes, Entry]] = None


@pytest.fixture(scope="session")
def tree() -> Dict[bytes, Entry]:
    global _TREE
    if _TREE is None:
        _TREE = scan(SRC)
    return _TREE


def regular_files(tree: Dict[bytes, Entry], limit: int = 1 << 62) -> List[bytes]:
    return sorted(
        rel for rel, e in tree.items() if stat.S_ISREG(e.st.st_mode) and e.st.st_size <= limit
    )
