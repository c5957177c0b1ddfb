"""``sealfs.Image`` and what it hands out: ``SealedFile`` (a raw binary file object),
``DirEntry`` (an ``os.scandir`` entry), ``Trust``; ``sealfs.open``."""

from __future__ import annotations

import ctypes
import io
import os
import stat as _stat
from typing import (
    Any,
    AnyStr,
    Callable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from typing import Literal

from . import _native
from ._errors import OpenRefusedError
from ._mount import Mount, log_path, mount_options

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
"""A path inside an image (``/a/b`` or ``a/b``, both from its root) or on the host."""

StrPath = Union[str, "os.PathLike[str]"]
"""A path given as ``str``: names come back as ``str``."""

BytesPath = Union[bytes, "os.PathLike[bytes]"]
"""A path given as ``bytes``: names come back as ``bytes``, as ``os`` does."""

__all__ = ["open", "Image", "SealedFile", "DirEntry", "Trust", "PathArg"]


def _paths(value: Union[None, PathArg, Sequence[PathArg]]) -> List[str]:
    """One path or several, as a list of ``str`` (for ``key=`` and ``ca_cert=``)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, os.PathLike)):
        return [os.fsdecode(value)]
    return [os.fsdecode(v) for v in value]


def _opt_path(value: Optional[PathArg]) -> Optional[str]:
    return None if value is None else os.fsdecode(value)


def _inner(path: PathArg) -> bytes:
    """A path in the image as the reader takes it: bytes, from the root. As ``os`` does, a NUL
    byte is a ``ValueError``, and ``""`` stays empty (the reader then raises
    ``FileNotFoundError``: it is not the root)."""
    p = os.fsencode(path)
    if b"\0" in p:
        raise ValueError("embedded null byte")
    return p if p.startswith(b"/") or not p else b"/" + p


def _is_bytes(path: PathArg) -> bool:
    """Whether names come back as ``bytes`` for ``path`` (as ``os.listdir`` decides)."""
    return isinstance(os.fspath(path), bytes)


def _stat_result(t: Tuple[int, ...]) -> os.stat_result:
    """An ``os.stat_result`` from the native fields; atime and ctime are the mtime (EROFS keeps
    one time, as a kernel mount shows it)."""
    mode, ino, nlink, uid, gid, size, mtime, mtime_nsec, blocks, blksize, rdev = t
    ns = mtime * 1_000_000_000 + mtime_nsec
    seconds = ns / 1e9
    return os.stat_result(
        (mode, ino, 0, nlink, uid, gid, size, mtime, mtime, mtime),
        {
            "st_atime": seconds,
            "st_mtime": seconds,
            "st_ctime": seconds,
            "st_atime_ns": ns,
            "st_mtime_ns": ns,
            "st_ctime_ns": ns,
            "st_blksize": blksize,
            "st_blocks": blocks,
            "st_rdev": rdev,
        },
    )


class Trust:
    """What opening an image established: who vouched for the digest every read is checked against.

    ``state`` is ``"authenticated"`` (the digest given, or a signature by a key given, vouches for
    the image), ``"self-consistent"`` (every block is checked against the image's own seal, which
    nobody vouched for) or ``"unverified"`` (a plain image, or ``verify="none"``). ``authority`` is
    ``"digest"`` or ``"key"`` for an authenticated image, with ``key_fingerprint`` the signer's;
    ``checker`` is ``"reader"`` (this process hashes every block) or ``"kernel"`` (the kernel's
    fs-verity does). ``str(trust)`` says it in words, as ``sealfs inspect`` does.
    """

    __slots__ = ("state", "digest", "authority", "key_fingerprint", "checker", "_text")

    def __init__(
        self,
        state: str,
        digest: Optional[str],
        authority: Optional[str],
        key_fingerprint: Optional[str],
        checker: Optional[str],
        text: str,
    ):
        self.state = state
        self.digest = digest
        self.authority = authority
        self.key_fingerprint = key_fingerprint
        self.checker = checker
        self._text = text

    @property
    def authenticated(self) -> bool:
        """Whether the digest was vouched for from outside (a digest or key given)."""
        return self.state == "authenticated"

    @property
    def verified(self) -> bool:
        """Whether every block read is checked (authenticated or self-consistent)."""
        return self.state != "unverified"

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<sealfs.Trust {self._text}>"


class SealedFile(io.RawIOBase):
    """A regular file of an image, open for reading: a raw, seekable binary file object.

    ``readinto`` reads straight into the caller's buffer (no intermediate copy) and ``read``
    straight into the bytes it returns, both with the GIL released and every block checked as the
    image was opened; a block that fails its check raises ``sealfs.VerificationError`` (an
    ``OSError`` with ``errno.EIO``). Wrap it in ``io.BufferedReader`` for many small reads; hand it
    to ``zipfile``, ``tarfile``, ``pyarrow``, ``pandas`` as it is. ``pread(n, offset)`` reads without
    moving the position, so one file may be read from several threads.
    """

    def __init__(self, native: Any, name: Union[str, bytes]):
        super().__init__()
        self._f = native
        self._pos = 0
        self.name = name
        self.mode = "rb"

    def _check(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    @property
    def size(self) -> int:
        """The file's size in bytes."""
        return self._f.size

    def readable(self) -> bool:
        self._check()
        return True

    def seekable(self) -> bool:
        self._check()
        return True

    def writable(self) -> bool:
        self._check()
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("a file in a sealfs image has no file descriptor")

    def isatty(self) -> bool:
        self._check()
        return False

    def readinto(self, b: Any) -> int:
        """Reads up to ``len(b)`` bytes into the writable buffer ``b``; returns how many (0 at the
        end of the file)."""
        self._check()
        m = memoryview(b)
        if m.format != "B" or m.ndim != 1:
            m = m.cast("B")
        n = m.nbytes
        if n == 0:
            return 0
        # The buffer stays exported (neither freed nor resized) while `window` lives.
        window = (ctypes.c_char * n).from_buffer(m)
        try:
            got = self._f.readinto_address(ctypes.addressof(window), n, self._pos)
        finally:
            del window
            m.release()
        self._pos += got
        return got

    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to ``size`` bytes (all that is left with ``-1`` or ``None``); fewer only at the end."""
        self._check()
        n = None if size is None or size < 0 else size
        data = self._f.pread(n, self._pos)
        self._pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def pread(self, n: int, offset: int) -> bytes:
        """Up to ``n`` bytes at ``offset``, without moving the position."""
        self._check()
        if offset < 0:
            raise ValueError("negative offset")
        return self._f.pread(None if n < 0 else n, offset)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._f.size + offset
        else:
            raise ValueError(f"invalid whence ({whence!r})")
        if pos < 0:
            raise OSError(22, "Invalid argument: negative seek position")
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check()
        return self._pos

    def truncate(self, size: Optional[int] = None) -> int:
        raise io.UnsupportedOperation("sealfs images are read-only")

    def stat(self) -> os.stat_result:
        """The file's ``os.stat_result``."""
        return _stat_result(self._f.stat())


class DirEntry:
    """An entry of ``Image.scandir``, as ``os.DirEntry``: ``name``, ``path``, ``inode()``,
    ``is_dir()``, ``is_file()``, ``is_symlink()``, ``stat()``. The type comes with the listing;
    ``stat()`` reads the inode (and, with ``follow_symlinks``, the target's)."""

    __slots__ = ("name", "path", "_ino", "_dtype", "_image", "_stat", "_lstat")

    _DT = {1: _stat.S_IFIFO, 2: _stat.S_IFCHR, 4: _stat.S_IFDIR, 6: _stat.S_IFBLK,
           8: _stat.S_IFREG, 10: _stat.S_IFLNK, 12: _stat.S_IFSOCK}

    def __init__(self, image: "Image", name: AnyStr, path: AnyStr, ino: int, dtype: int):
        self.name = name
        self.path = path
        self._ino = ino
        self._dtype = dtype
        self._image = image
        self._stat: Optional[os.stat_result] = None
        self._lstat: Optional[os.stat_result] = None

    def inode(self) -> int:
        return self._ino

    def is_symlink(self) -> bool:
        return self._dtype == 10

    def _type(self, follow_symlinks: bool) -> int:
        if follow_symlinks and self.is_symlink():
            try:
                return _stat.S_IFMT(self.stat().st_mode)
            except OSError:
                return 0
        return self._DT.get(self._dtype, 0)

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._type(follow_symlinks) == _stat.S_IFDIR

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._type(follow_symlinks) == _stat.S_IFREG

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks and self.is_symlink():
            if self._stat is None:
                self._stat = self._image.stat(self.path)
            return self._stat
        if self._lstat is None:
            self._lstat = self._image.lstat(self.path)
        return self._lstat

    def __fspath__(self) -> AnyStr:
        return self.path

    def __repr__(self) -> str:
        return f"<sealfs.DirEntry {self.name!r}>"


class Image:
    """A sealed (or plain) EROFS image opened by ``sealfs.open``: read its files without mounting.

    Paths inside the image are ``str`` or ``bytes`` (``/etc/passwd`` or ``etc/passwd``, both from
    its root); names come back as the same type, as ``os`` does (``str`` through
    ``os.fsdecode``). Every read is checked as ``trust`` says. An ``Image`` may be shared by any
    number of threads (the GIL is released during reads, walks and listings), pickled (the copy
    opens the same image again and insists on the same digest), and used in a forked child
    (``multiprocessing``, PyTorch ``DataLoader`` workers), which opens it again on first use.
    """

    def __init__(self, native: Any, location: str, kwargs: Dict[str, Any]):
        self._n = native
        self._location = location
        self._kwargs = kwargs

    # ---- the image ------------------------------------------------------------------------

    @property
    def _native(self) -> Any:
        n = self._n
        if n is None:
            raise ValueError("I/O operation on a closed sealfs image")
        return n

    @property
    def location(self) -> str:
        """The path or URL the image was opened from."""
        return self._location

    @property
    def trust(self) -> Trust:
        """What the open established (see ``Trust``)."""
        return Trust(*self._native.trust)

    @property
    def digest(self) -> Optional[str]:
        """The image digest every read is checked against (``None`` when unverified)."""
        return self.trust.digest

    @property
    def stats(self) -> Dict[str, int]:
        """The reader's counters: blocks read and verified, cache hits and misses, bytes
        decompressed, absent-xattr lookups the bloom filter answered; for a URL also requests,
        round trips and bytes fetched (``sealfs cat --stats`` prints the same names)."""
        return dict(self._native.counters())

    def close(self) -> None:
        """Forgets the image; files opened from it stay readable until closed. Once neither the
        image nor a file of it is referenced, a URL's readahead and fill stop (a fetch in flight
        ends in the background)."""
        self._n = None

    @property
    def closed(self) -> bool:
        return self._n is None

    def __enter__(self) -> "Image":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_reopen, (self._location, self._kwargs, self.digest))

    def __repr__(self) -> str:
        if self._n is None:
            return f"<sealfs.Image {self._location!r} closed>"
        return f"<sealfs.Image {self._location!r} {self.trust}>"

    # ---- mounting -------------------------------------------------------------------------

    def mount(
        self,
        mountpoint: Union[str, "os.PathLike[str]"],
        *,
        allow_other: bool = False,
        allow_root: bool = False,
        options: Union[None, str, Sequence[str]] = None,
        threads: Optional[int] = None,
        read_ahead: int = 1 << 20,
        xattrs: Literal["auto", "on", "off"] = "auto",
        fsname: Optional[str] = None,
        log: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> Mount:
        """Mounts the image read-only on directory ``mountpoint`` over FUSE, as ``sealfs mount``
        does, but served by background threads of this process (no daemon) until the returned
        ``Mount`` is unmounted (or used as a context manager, or collected). The image is opened
        again for the mount as it was opened (the same digest, keys and cache; a mount's larger
        caches) and must have the same digest; every read through the mount is checked as
        ``trust`` says: a block that fails its check fails that read with ``EIO``.

        - ``allow_other``: every user may use the mount (``-o allow_other``; what an overlayfs
          lower directory used by other users needs); ``allow_root``: root too. Otherwise only
          this process's user. Permissions are checked by the kernel against the image's modes.
        - ``options``: more ``-o`` options, a comma-separated string or a list: ``nodev``,
          ``nosuid``, ``noexec``, ``noatime`` (and ``dev``, ``suid``, ``exec``, ``atime``),
          ``fsname=NAME``; ``ro`` and ``default_permissions`` are always on, ``rw`` is refused
          (``ValueError``).
        - ``threads``: threads serving requests (default one per CPU, at least 2).
        - ``read_ahead``: the kernel's readahead for the mount, in bytes (default 1 MiB; needs
          root, kept as the kernel's otherwise; 0 leaves it).
        - ``xattrs``: ``"on"`` answers every extended attribute request from the image, ``"off"``
          shows none, ``"auto"`` turns them off once a background read of every inode finds none.
        - ``fsname``: the mount's source in ``/proc/mounts`` (default the image's path).
        - ``log``: a file failed reads are appended to (once each), instead of standard error.

        A URL opened with the cache has its metadata fetched ahead and is filled as ``fill``
        said. Raises ``OSError`` when the mount point is not a directory (``ENOTDIR``), is a
        stale FUSE mount (``ENOTCONN``: ``sealfs umount`` it), or the kernel refuses the mount.
        """
        native = self._native.mount(
            os.fsdecode(mountpoint),
            options=mount_options(options, allow_other, allow_root),
            threads=threads,
            read_ahead=read_ahead,
            xattrs=xattrs,
            fsname=fsname,
            log=log_path(log),
        )
        return Mount(native)

    # ---- files ----------------------------------------------------------------------------

    @overload
    def open(
        self,
        path: PathArg,
        mode: Literal["rb", "br"] = "rb",
        *,
        encoding: None = None,
        errors: None = None,
        newline: None = None,
    ) -> SealedFile: ...

    @overload
    def open(
        self,
        path: PathArg,
        mode: Literal["r", "rt", "tr"],
        *,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
    ) -> io.TextIOWrapper: ...

    def open(
        self,
        path: PathArg,
        mode: str = "rb",
        *,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
    ) -> Union[SealedFile, io.TextIOWrapper]:
        """Opens regular file ``path`` (symlinks followed) for reading.

        ``"rb"`` (the default) gives a ``SealedFile``, a raw binary file object; ``"r"`` a text
        file over it (``io.TextIOWrapper`` on an ``io.BufferedReader``). A directory raises
        ``IsADirectoryError``, a missing path ``FileNotFoundError``.
        """
        if mode not in ("rb", "br", "r", "rt", "tr"):
            raise ValueError(f"mode {mode!r}: sealfs images are read-only ('rb' or 'r')")
        raw = SealedFile(self._native.open_file(_inner(path)), path if isinstance(path, (str, bytes)) else os.fspath(path))
        if "b" in mode:
            return raw
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=encoding, errors=errors, newline=newline)

    def read_bytes(self, path: PathArg) -> bytes:
        """The whole content of regular file ``path`` (symlinks followed)."""
        return self._native.read_bytes(_inner(path))

    def read_text(self, path: PathArg, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The content of regular file ``path``, decoded."""
        return self.read_bytes(path).decode(encoding, errors)

    # ---- metadata -------------------------------------------------------------------------

    def stat(self, path: PathArg, *, follow_symlinks: bool = True) -> os.stat_result:
        """``os.stat`` of ``path``: mode, inode number, link count, owner, size, blocks and the
        modification time (atime and ctime equal it, as on a kernel mount); ``st_dev`` is 0."""
        return _stat_result(self._native.stat(_inner(path), follow_symlinks))

    def lstat(self, path: PathArg) -> os.stat_result:
        """``stat`` of ``path`` itself, a symlink not followed."""
        return self.stat(path, follow_symlinks=False)

    def exists(self, path: PathArg) -> bool:
        """Whether ``path`` exists (a dangling symlink does not). As ``os.path.exists``, any
        ``OSError`` or ``ValueError`` (a NUL byte) is ``False``; so for ``isdir``, ``isfile`` and
        ``islink``."""
        try:
            self.stat(path)
        except (OSError, ValueError):
            return False
        return True

    def isdir(self, path: PathArg) -> bool:
        try:
            return _stat.S_ISDIR(self.stat(path).st_mode)
        except (OSError, ValueError):
            return False

    def isfile(self, path: PathArg) -> bool:
        try:
            return _stat.S_ISREG(self.stat(path).st_mode)
        except (OSError, ValueError):
            return False

    def islink(self, path: PathArg) -> bool:
        try:
            return _stat.S_ISLNK(self.lstat(path).st_mode)
        except (OSError, ValueError):
            return False

    @overload
    def readlink(self, path: BytesPath) -> bytes: ...

    @overload
    def readlink(self, path: StrPath) -> str: ...

    def readlink(self, path: PathArg) -> Union[str, bytes]:
        """The target of symlink ``path`` (``OSError(EINVAL)`` for anything else)."""
        target: bytes = self._native.readlink(_inner(path))
        return target if _is_bytes(path) else os.fsdecode(target)

    def getxattr(self, path: PathArg, name: Union[str, bytes], *, follow_symlinks: bool = True) -> bytes:
        """The value of extended attribute ``name`` (``OSError(ENODATA)`` when absent)."""
        return self._native.getxattr(_inner(path), os.fsencode(name), follow_symlinks)

    def listxattr(self, path: PathArg = "/", *, follow_symlinks: bool = True) -> List[str]:
        """The names of the extended attributes of ``path``."""
        return [os.fsdecode(n) for n in self._native.listxattr(_inner(path), follow_symlinks)]

    # ---- directories ----------------------------------------------------------------------

    @overload
    def listdir(self, path: BytesPath) -> List[bytes]: ...

    @overload
    def listdir(self, path: StrPath = "/") -> List[str]: ...

    def listdir(self, path: PathArg = "/") -> Union[List[str], List[bytes]]:
        """The names in directory ``path`` ("." and ".." left out), in the image's order: ``bytes``
        for a ``bytes`` path, ``str`` otherwise, as ``os.listdir``."""
        entries = self._native.listdir(_inner(path))
        if _is_bytes(path):
            return [e[0] for e in entries]
        return [os.fsdecode(e[0]) for e in entries]

    def scandir(self, path: PathArg = "/") -> Iterator[DirEntry]:
        """The entries of directory ``path`` as ``DirEntry`` objects (as ``os.scandir``)."""
        as_bytes = _is_bytes(path)
        base = os.fsencode(path) if as_bytes else os.fsdecode(path)
        sep: Any = b"/" if as_bytes else "/"
        for name, ino, dtype in self._native.listdir(_inner(path)):
            n: Any = name if as_bytes else os.fsdecode(name)
            full = base + n if base.endswith(sep) else base + sep + n
            yield DirEntry(self, n, full, ino, dtype)

    @overload
    def walk(
        self,
        top: BytesPath,
        topdown: bool = True,
        onerror: Optional[Callable[[OSError], Any]] = None,
    ) -> Iterator[Tuple[bytes, List[bytes], List[bytes]]]: ...

    @overload
    def walk(
        self,
        top: StrPath = "/",
        topdown: bool = True,
        onerror: Optional[Callable[[OSError], Any]] = None,
    ) -> Iterator[Tuple[str, List[str], List[str]]]: ...

    def walk(
        self,
        top: PathArg = "/",
        topdown: bool = True,
        onerror: Optional[Callable[[OSError], Any]] = None,
    ) -> Iterator[Tuple[Any, List[Any], List[Any]]]:
        """Walks the tree below ``top`` as ``os.walk`` does: ``(dirpath, dirnames, filenames)``
        for every directory, top-down (pruned by removing names from ``dirnames``) or bottom-up.

        The whole tree is listed at once by the reader's walk, with the GIL released. Unlike
        ``os.walk``, a symlink is always in ``filenames``, even to a directory (the walk never
        follows one). Entries that cannot be read are passed to ``onerror`` as ``OSError``\\ s.
        """
        as_bytes = _is_bytes(top)
        conv: Callable[[bytes], Any] = (lambda b: b) if as_bytes else os.fsdecode
        start = _inner(top)
        try:
            listed, errors = self._native.walk(start)
        except OSError as e:
            # As os.walk: a top that cannot be listed yields nothing, the error to onerror.
            if onerror is not None:
                onerror(e)
            return
        if onerror is not None:
            for p, errno, message in errors:
                onerror(OSError(errno, message, os.fsdecode(p)))
        # The reader's paths start at `start`; show them from `top` as given.
        prefix = os.fsencode(top)
        dirs: Dict[bytes, Tuple[List[Any], List[Any]]] = {}
        for path, entries in listed:
            shown = prefix + path[len(start):] if path.startswith(start) else path
            names_d = [conv(n) for n, t in entries if t == 4]
            names_f = [conv(n) for n, t in entries if t != 4]
            dirs[shown] = (names_d, names_f)

        def join(a: bytes, b: bytes) -> bytes:
            return a + b if a.endswith(b"/") else a + b"/" + b

        def visit(path: bytes) -> Iterator[Tuple[Any, List[Any], List[Any]]]:
            d, f = dirs[path]
            if topdown:
                yield conv(path), d, f
            for name in list(d):
                sub = join(path, os.fsencode(name))
                if sub in dirs:
                    yield from visit(sub)
            if not topdown:
                yield conv(path), d, f

        root = os.fsencode(top)
        if root in dirs:
            yield from visit(root)

    def extract(
        self,
        dest: PathArg,
        path: PathArg = "/",
        *,
        overwrite: bool = False,
        xattrs: bool = True,
        threads: int = 0,
    ) -> Dict[str, Any]:
        """Extracts the tree below ``path`` into directory ``dest`` (created if missing; it must be
        empty unless ``overwrite``), as ``sealfs extract`` does: data with holes, links, devices,
        modes, owners (as root), times and xattrs; never writing outside ``dest``.

        Returns a summary: ``outcome`` (``"complete"``, ``"not-restored"``, ``"image-fault"``,
        ``"local-error"``), counts of what was made, ``warnings`` and ``errors`` (the extraction
        goes on after each; a file whose data failed its check is removed again).
        """
        return self._native.extract(os.fsdecode(dest), _inner(path), overwrite, xattrs, threads)


def _reopen(location: str, kwargs: Dict[str, Any], digest: Optional[str]) -> Image:
    """An unpickled ``Image``: the same location and options, and the same digest."""
    image = open(location, **kwargs)
    if image.digest != digest:
        raise OpenRefusedError(
            f"{location}: opened again, the image is {image.digest or 'unverified'}, "
            f"not the {digest or 'unverified image'} it was"
        )
    return image


def open(
    location: PathArg,
    *,
    digest: Optional[str] = None,
    key: Union[None, PathArg, Sequence[PathArg]] = None,
    keyring: Optional[PathArg] = None,
    verify: str = "full",
    cache_dir: Optional[PathArg] = None,
    cache_size: Optional[int] = None,
    cache: bool = True,
    sidecar: Optional[PathArg] = None,
    signatures: Optional[PathArg] = None,
    self_consistent: bool = False,
    ca_cert: Union[None, PathArg, Sequence[PathArg]] = None,
    cluster_cache: Optional[int] = None,
    block_cache: Optional[int] = None,
    min_version: Optional[str] = None,
    fill: Literal["off", "auto", "on"] = "off",
) -> Image:
    """Opens the image at ``location``: a path, or an ``http://``, ``https://`` or ``s3://`` URL
    (read lazily with range requests; S3 settings from the ``AWS_*`` environment variables).

    - ``digest`` (``"sha256:<hex>"``): the image must have it; any other image raises
      ``DigestMismatchError``. ``key`` (a public key PEM file, or several) and ``keyring`` (a
      directory of ``*.pub`` keys): the image must carry a signature by one of them, else
      ``SignatureError``. Without either, a local image is checked against its own seal
      (``trust.state == "self-consistent"``), and a URL is refused (``OpenRefusedError``) unless
      ``self_consistent=True``: whoever can change the object can change its seal.
    - ``verify``: ``"full"`` (every block checked before use) or ``"none"`` (trust the bytes).
    - ``cache_dir``, ``cache_size`` (bytes), ``cache``: where a URL's verified blocks are kept across
      processes (default ``$SEALFS_CACHE_DIR``, ``$XDG_CACHE_HOME/sealfs`` or ``~/.cache/sealfs``,
      2 GiB); ``cache=False`` fetches every block when needed.
    - ``sidecar``: the seal is in this file (or URL); ``signatures``: detached signatures (default
      ``IMAGE.sig`` beside the image when it exists, ``URL.sig`` for a URL with keys).
    - ``ca_cert``: certificate authorities (PEM) to trust for ``https://`` besides the system's.
    - ``min_version``: with keys, an image signed with a lower version (``sealfs sign --version``)
      is refused (a rollback).
    - ``cluster_cache`` (bytes of decompressed clusters) and ``block_cache`` (blocks) size the
      in-memory caches.
    - ``fill``: whether a URL read through the cache has the rest of the image fetched into the
      cache in the background. ``"off"`` (the default): each block is fetched when first read, and
      a sequential read fetches ahead of itself only, so a process that reads a few files pays for
      those. ``"auto"``: once reads scatter (16 reads within 10 s that each had to fetch), if the
      image takes at most three quarters of ``cache_size``, as ``sealfs mount`` does by default;
      ``"on"``: from the open on. Both transfer the whole image (billed egress, for a cloud
      bucket) while the ``Image`` is open; closing it (or collecting it) stops the fill.

    Raises ``FileNotFoundError`` for a missing image, ``CorruptedImageError`` for a damaged seal or
    a file that is not EROFS, ``OpenRefusedError`` (and its subclasses) for a refused one.
    """
    kwargs: Dict[str, Any] = {
        "digest": digest,
        "key": _paths(key),
        "keyring": _opt_path(keyring),
        "verify": verify,
        "cache_dir": _opt_path(cache_dir),
        "cache_size": cache_size,
        "cache": cache,
        "sidecar": _opt_path(sidecar),
        "signatures": _opt_path(signatures),
        "self_consistent": self_consistent,
        "ca_cert": _paths(ca_cert),
        "cluster_cache": cluster_cache,
        "block_cache": block_cache,
        "min_version": min_version,
        "fill": fill,
    }
    where = os.fsdecode(location)
    native = _native.open(
        where,
        digest=digest,
        keys=kwargs["key"],
        keyring=kwargs["keyring"],
        sidecar=kwargs["sidecar"],
        signatures=kwargs["signatures"],
        verify=verify,
        self_consistent=self_consistent,
        cache=cache,
        cache_dir=kwargs["cache_dir"],
        cache_size=cache_size,
        ca_certs=kwargs["ca_cert"],
        cluster_cache=cluster_cache,
        block_cache=block_cache,
        min_version=min_version,
        fill=fill,
    )
    return Image(native, where, kwargs)
