"""An fsspec file system over a sealfs image: the ``sealfs`` protocol (registered by the package's
``fsspec.specs`` entry point: with fsspec installed, ``pip install "sealfs[fsspec]"`` installs
both, nothing else is needed).

    >>> import fsspec, pandas
    >>> with fsspec.open("sealfs://data/train.csv", image="s3://bucket/ds.img", key="pub.pem") as f:
    ...     df = pandas.read_csv(f)
    >>> df = pandas.read_csv("sealfs://data/train.csv",
    ...                      storage_options={"image": "ds.img", "digest": "sha256:..."})
    >>> import pyarrow.parquet as pq
    >>> fs = fsspec.filesystem("sealfs", image="ds.img", digest="sha256:...")
    >>> table = pq.read_table("data/train.parquet", filesystem=fs)
    >>> import duckdb
    >>> con = duckdb.connect()
    >>> con.register_filesystem(fs)
    >>> con.sql("SELECT count(*) FROM read_parquet('sealfs://data/train.parquet')")

Paths are relative to the image's root (``sealfs://data/x`` and ``sealfs:///data/x`` both name
``/data/x``). The file system is read-only; every read is verified as the image was opened
(``image=`` and the other options are ``sealfs.open``'s). An instance pickles by its options, so
dask and multiprocessing workers open the same image (and insist on the same digest).
"""

from __future__ import annotations

import datetime
import stat as _stat
from typing import Any, Dict, List, Optional, Union

from fsspec.spec import AbstractFileSystem

from ._image import Image, PathArg, SealedFile, open as _open_image

__all__ = ["SealFileSystem"]


class SealFileSystem(AbstractFileSystem):
    """The files of one sealfs image, read-only.

    ``image`` is the image's path or URL (or an opened ``sealfs.Image``); every other keyword
    argument is passed to ``sealfs.open`` (``digest``, ``key``, ``keyring``, ``verify``,
    ``cache_dir``, ``self_consistent``, ...).
    """

    protocol = "sealfs"
    root_marker = ""

    def __init__(self, image: Union[PathArg, Image, None] = None, **options: Any):
        super().__init__(image=image, **options)
        if image is None:
            raise ValueError("sealfs file system: give image= (the image's path or URL)")
        for k in _FSSPEC_OPTIONS:
            options.pop(k, None)
        self.image: Image = image if isinstance(image, Image) else _open_image(image, **options)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = super()._strip_protocol(path)
        return path.strip("/")

    @staticmethod
    def _inner(path: str) -> str:
        return "/" + path.strip("/")

    def _info_of(self, path: str, st: Any, link: Optional[str] = None) -> Dict[str, Any]:
        mode = st.st_mode
        if _stat.S_ISDIR(mode):
            kind = "directory"
        elif _stat.S_ISREG(mode):
            kind = "file"
        else:
            kind = "other"
        info: Dict[str, Any] = {
            "name": path,
            "size": st.st_size if kind == "file" else 0,
            "type": kind,
            "mode": mode,
            "ino": st.st_ino,
            "nlink": st.st_nlink,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "mtime": st.st_mtime,
            "islink": link is not None,
        }
        if link is not None:
            info["destination"] = link
        return info

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        path = self._strip_protocol(path)
        inner = self._inner(path)
        lst = self.image.lstat(inner)
        if _stat.S_ISLNK(lst.st_mode):
            target = self.image.readlink(inner)
            try:
                return self._info_of(path, self.image.stat(inner), link=str(target))
            except FileNotFoundError:
                return self._info_of(path, lst, link=str(target))
        return self._info_of(path, lst)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        path = self._strip_protocol(path)
        inner = self._inner(path)
        if not self.image.isdir(inner):
            info = self.info(path)
            return [info] if detail else [info["name"]]
        names = [e.name for e in self.image.scandir(inner)]
        full = [f"{path}/{n}" if path else n for n in names]
        if not detail:
            return full
        return [self.info(p) for p in full]

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Optional[int] = None,
        autocommit: bool = True,
        cache_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> SealedFile:
        if "r" not in mode or any(c in mode for c in "wax+"):
            raise PermissionError(f"sealfs images are read-only (mode {mode!r})")
        return self.image.open(self._inner(self._strip_protocol(path)), "rb")

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        with self.image.open(self._inner(path)) as f:
            size = f.size
            start = 0 if start is None else (start + size if start < 0 else start)
            end = size if end is None else (end + size if end < 0 else end)
            if end <= start:
                return b""
            return f.pread(end - start, start)

    def ukey(self, path: str) -> str:
        """The image digest and the path: the same in every process that opens the same image."""
        return f"{self.image.digest or self.image.location}:{self._strip_protocol(path)}"

    def modified(self, path: str) -> datetime.datetime:
        st = self.image.stat(self._inner(self._strip_protocol(path)))
        return datetime.datetime.fromtimestamp(st.st_mtime, tz=datetime.timezone.utc)

    def created(self, path: str) -> datetime.datetime:
        """EROFS keeps one time: the modification time."""
        return self.modified(path)


# Options fsspec's caching passes through instantiation, not sealfs.open's.
_FSSPEC_OPTIONS = {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"}
