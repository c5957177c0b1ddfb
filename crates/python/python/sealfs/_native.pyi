"""Type stubs of ``sealfs._native``, the native half of the ``sealfs`` package (use ``sealfs``).

Paths inside images are ``bytes`` here (``sealfs`` converts); locations on the host and URLs are
``str``.
"""

from typing import List, Optional, Tuple

__version__: str

StatTuple = Tuple[int, int, int, int, int, int, int, int, int, int, int]
"""``(mode, ino, nlink, uid, gid, size, mtime, mtime_nsec, blocks, blksize, rdev)``."""

class File:
    """A regular file of an image, read at offsets."""

    @property
    def size(self) -> int: ...
    @property
    def path(self) -> bytes: ...
    def stat(self) -> StatTuple: ...
    def pread(self, n: Optional[int], offset: int) -> bytes: ...
    def readinto_address(self, address: int, n: int, offset: int) -> int: ...

class Mount:
    """An image mounted by ``Image.mount``, served by threads of this process."""

    @property
    def mountpoint(self) -> str: ...
    @property
    def mounted(self) -> bool: ...
    def stats(self) -> str: ...
    def unmount(self) -> None: ...

class Image:
    """An opened image (fork-aware: a forked child opens it again on first use)."""

    @property
    def location(self) -> str: ...
    def mount(
        self,
        mountpoint: str,
        *,
        options: str = "",
        threads: Optional[int] = None,
        read_ahead: int = ...,
        xattrs: str = "auto",
        fsname: Optional[str] = None,
        log: Optional[str] = None,
    ) -> Mount: ...
    @property
    def trust(
        self,
    ) -> Tuple[str, Optional[str], Optional[str], Optional[str], Optional[str], str]: ...
    def stat(self, path: bytes, follow: bool = True) -> StatTuple: ...
    def listdir(self, path: bytes) -> List[Tuple[bytes, int, int]]: ...
    def readlink(self, path: bytes) -> bytes: ...
    def getxattr(self, path: bytes, name: bytes, follow: bool = True) -> bytes: ...
    def listxattr(self, path: bytes, follow: bool = True) -> List[bytes]: ...
    def open_file(self, path: bytes) -> File: ...
    def read_bytes(self, path: bytes) -> bytes: ...
    def walk(
        self, path: bytes
    ) -> Tuple[List[Tuple[bytes, List[Tuple[bytes, int]]]], List[Tuple[bytes, int, str]]]: ...
    def extract(
        self,
        dest: bytes,
        path: bytes,
        overwrite: bool = False,
        xattrs: bool = True,
        threads: int = 0,
    ) -> dict: ...
    def counters(self) -> List[Tuple[str, int]]: ...

def open(
    location: str,
    *,
    digest: Optional[str] = None,
    keys: List[str] = ...,
    keyring: Optional[str] = None,
    sidecar: Optional[str] = None,
    signatures: Optional[str] = None,
    verify: str = "full",
    self_consistent: bool = False,
    cache: bool = True,
    cache_dir: Optional[str] = None,
    cache_size: Optional[int] = None,
    ca_certs: List[str] = ...,
    cluster_cache: Optional[int] = None,
    block_cache: Optional[int] = None,
    min_version: Optional[str] = None,
    fill: str = "off",
) -> Image: ...
def build(
    src: str,
    out: str,
    *,
    compression: Optional[str] = None,
    preset: Optional[str] = None,
    pcluster_bytes: Optional[int] = None,
    timestamp: Optional[int] = None,
    source_date_epoch: Optional[int] = None,
    all_root: bool = False,
    label: Optional[str] = None,
    xattrs: bool = True,
    threads: int = 0,
    seal: bool = True,
    key: Optional[str] = None,
    name: Optional[str] = None,
    version: Optional[str] = None,
) -> dict: ...
def digest(
    location: str,
    *,
    sidecar: Optional[str] = None,
    hash_alg: str = "sha256",
    ca_certs: List[str] = ...,
) -> str: ...
def verify(
    location: str,
    *,
    digest: Optional[str] = None,
    keys: List[str] = ...,
    keyring: Optional[str] = None,
    sidecar: Optional[str] = None,
    signatures: Optional[str] = None,
    max_problems: int = 100,
    ca_certs: List[str] = ...,
    min_version: Optional[str] = None,
) -> str: ...
