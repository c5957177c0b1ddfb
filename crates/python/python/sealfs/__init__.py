"""Read sealed filesystem images from Python, without mounting: local files or ``http(s)://`` and
``s3://`` URLs, every block verified against the image digest before it is used.

A sealfs image is a read-only directory tree packed into one file: an EROFS image the Linux kernel
mounts as it is, protected end to end by one fs-verity Merkle tree whose digest
(``sha256:<64 hex>``) names every byte. This package reads such images (and plain EROFS images)
with the same library the ``sealfs`` command uses:

    >>> import sealfs
    >>> img = sealfs.open("data.img", digest="sha256:3f1c...")   # or key="release.pub"
    >>> img.trust.state                                           # 'authenticated'
    >>> with img.open("/train/labels.csv") as f:                  # a raw binary file object
    ...     head = f.read(100)
    >>> for dirpath, dirnames, filenames in img.walk("/"):
    ...     ...

Reading:
    ``open(location, *, digest=..., key=..., keyring=..., verify="full", cache_dir=...,
    fill="off")`` (keyword arguments after ``location``) returns an
    ``Image``: ``open(path)`` (a ``SealedFile``: seekable, ``readinto`` without a copy),
    ``read_bytes``, ``listdir``, ``scandir``, ``stat``/``lstat`` (``os.stat_result``),
    ``readlink``, ``getxattr``/``listxattr``, ``walk``, ``extract(dest)``, ``trust``, ``stats``.
    An ``Image`` is safe to share between threads (the GIL is released during reads, walks and
    listings), can be pickled, and works in forked children (``multiprocessing``, PyTorch
    ``DataLoader`` workers), which open the image again and insist on the same digest.

Building and checking:
    ``build(src, out, compression=..., preset=..., key=...)`` packs a directory;
    ``digest(path)`` computes the image digest from the bytes; ``verify(path, digest=..., key=...)``
    checks every block and returns the report ``sealfs verify --json`` prints.

Mounting:
    ``img.mount(mountpoint, allow_other=..., options=..., threads=..., read_ahead=...)`` mounts
    the image over FUSE, served by threads of this process (``sealfs mount``'s options), and
    returns a ``Mount`` (``mountpoint``, ``stats()``, ``unmount()``; a context manager).

fsspec:
    ``fsspec.open("sealfs://data/train.parquet", image="s3://bucket/ds.img", key="pub.pem")``
    (the ``sealfs`` protocol, registered by entry point), so pandas, pyarrow, DuckDB and Hugging
    Face ``datasets`` read straight from an image: see ``sealfs.fsspec.SealFileSystem``.

Errors:
    A block that fails its check raises ``VerificationError``, an ``OSError`` with ``errno.EIO``
    naming the block and the file; only that read fails. A missing path raises
    ``FileNotFoundError`` (other reader errors raise the ``OSError`` of the kernel's errno). A
    damaged image or seal raises ``CorruptedImageError``. An image refused at open (another digest,
    no signature by the keys given, a URL with neither) raises ``OpenRefusedError``
    (``DigestMismatchError``, ``SignatureError``).
"""

from __future__ import annotations

import json as _json
import os as _os
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native
from ._errors import (
    BuildError,
    CorruptedImageError,
    DigestMismatchError,
    OpenRefusedError,
    SealfsError,
    SignatureError,
    VerificationError,
)
from ._image import DirEntry, Image, PathArg, SealedFile, Trust, _opt_path, _paths, open
from ._mount import Mount

__version__: str = _native.__version__

__all__ = [
    "open",
    "build",
    "digest",
    "verify",
    "Image",
    "Mount",
    "SealedFile",
    "DirEntry",
    "Trust",
    "SealfsError",
    "VerificationError",
    "CorruptedImageError",
    "OpenRefusedError",
    "DigestMismatchError",
    "SignatureError",
    "BuildError",
    "__version__",
]


def __dir__() -> List[str]:
    """The public names (``__all__``), without the helpers the modules import."""
    return sorted(__all__)


def build(
    src: PathArg,
    out: PathArg,
    *,
    compression: Optional[str] = None,
    preset: Optional[str] = None,
    pcluster_bytes: Optional[int] = None,
    key: Optional[PathArg] = None,
    name: Optional[str] = None,
    version: Optional[str] = None,
    timestamp: Optional[int] = None,
    source_date_epoch: Optional[int] = None,
    all_root: bool = False,
    label: Optional[str] = None,
    xattrs: bool = True,
    threads: int = 0,
    seal: bool = True,
) -> Dict[str, Any]:
    """Builds a sealed image of directory ``src`` at ``out``, as ``sealfs build`` does (the file is
    replaced atomically; nothing is left at ``out`` on error). The GIL is released meanwhile.

    - ``compression``: ``"lz4"``, ``"lz4hc[,LEVEL]"``, ``"zstd[,LEVEL]"``, ``"lzma[,LEVEL]"`` or
      ``"deflate[,LEVEL]"`` (``-z``); ``pcluster_bytes``: the largest physical cluster (``-C``);
      ``preset``: ``"small"`` or ``"fast"`` (``--preset``; ``compression`` and ``pcluster_bytes``
      change what they name).
    - ``key``: an Ed25519 private key (PEM PKCS#8) to sign the image with, ``name`` and ``version``
      going into the signed statement (``sealfs sign``).
    - ``timestamp``: every inode's mtime; ``source_date_epoch``: newer mtimes clamped to it;
      ``all_root``: owned by root; ``label``: the volume label; ``xattrs=False``: none copied;
      ``threads``: workers (0: one per CPU; the image does not depend on it); ``seal=False``: a
      plain EROFS image.

    Returns ``digest`` (``None`` unsealed), ``signed_by``, ``inodes``, ``files``, ``dirs``,
    ``data_bytes``, ``image_bytes`` and ``warnings`` (what was left out). Raises ``OSError`` for a
    path it could not read or write, ``BuildError`` for a tree it cannot store.
    """
    return _native.build(
        _os.fsdecode(src),
        _os.fsdecode(out),
        compression=compression,
        preset=preset,
        pcluster_bytes=pcluster_bytes,
        timestamp=timestamp,
        source_date_epoch=source_date_epoch,
        all_root=all_root,
        label=label,
        xattrs=xattrs,
        threads=threads,
        seal=seal,
        key=_opt_path(key),
        name=name,
        version=version,
    )


def digest(
    location: PathArg,
    *,
    sidecar: Optional[PathArg] = None,
    hash_alg: str = "sha256",
    ca_cert: Union[None, PathArg, Sequence[PathArg]] = None,
) -> str:
    """The image digest (``sha256:<hex>``, what ``fsverity digest`` prints for the EROFS bytes),
    computed from the bytes of the image at a path or URL, as ``sealfs digest`` does. For a
    sealed image whose bytes hash to another digest than its seal names, ``CorruptedImageError``;
    ``hash_alg`` is used for a plain image only."""
    return _native.digest(
        _os.fsdecode(location),
        sidecar=_opt_path(sidecar),
        hash_alg=hash_alg,
        ca_certs=_paths(ca_cert),
    )


def verify(
    location: PathArg,
    *,
    digest: Optional[str] = None,
    key: Union[None, PathArg, Sequence[PathArg]] = None,
    keyring: Optional[PathArg] = None,
    sidecar: Optional[PathArg] = None,
    signatures: Optional[PathArg] = None,
    max_problems: int = 100,
    ca_cert: Union[None, PathArg, Sequence[PathArg]] = None,
    min_version: Optional[str] = None,
) -> Dict[str, Any]:
    """Checks every byte of the image at a path or URL against its seal (and ``digest``, and the
    signatures of ``key``/``keyring``), as ``sealfs verify --json`` does, and returns the same
    report: ``image``, ``verified``, ``sealed``, ``authenticated``, ``signed_by``, ``digest``,
    ``file_digests`` and ``file_digests_authenticated`` (where the per-file digests came from, and
    whether the image digest covers them), and ``problems`` (each with its ``kind`` — ``data_block``, ``tree_block``, ``file_digest``,
    ``trailer``, ``signature``, ``digest`` —, where it is and a ``message``; a damaged block names
    the file that owns it). A damaged image is a report with problems, not an exception; one that
    cannot be read at all raises ``OSError``. Notes of the check are issued as warnings.
    """
    text = _native.verify(
        _os.fsdecode(location),
        digest=digest,
        keys=_paths(key),
        keyring=_opt_path(keyring),
        sidecar=_opt_path(sidecar),
        signatures=_opt_path(signatures),
        max_problems=max_problems,
        ca_certs=_paths(ca_cert),
        min_version=min_version,
    )
    return _json.loads(text)
