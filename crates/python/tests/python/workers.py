"""Worker functions of test_concurrency (a module of its own, so that spawned workers import it)."""

from __future__ import annotations

import hashlib
from typing import Dict, List, Optional

import sealfs

# The image a forked worker inherits (set by the parent before the fork), or the one a spawned
# worker unpickled.
IMAGE: Optional[sealfs.Image] = None


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def use(image: sealfs.Image) -> None:
    """A spawned worker's initializer: the image arrives pickled."""
    global IMAGE
    IMAGE = image


def read_files(paths: List[bytes]) -> Dict[bytes, str]:
    """The SHA-256 of each file, read through the image this process has."""
    assert IMAGE is not None
    out = {}
    for p in paths:
        with IMAGE.open(p) as f:
            out[p] = sha(f.read())
    return out


def digest_and_trust() -> tuple:
    assert IMAGE is not None
    return IMAGE.digest, IMAGE.trust.state
