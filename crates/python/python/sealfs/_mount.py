"""``sealfs.Mount``: an image mounted over FUSE by ``Image.mount``, served by threads of this
process."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

__all__ = ["Mount"]


class Mount:
    """An image mounted read-only over FUSE by ``Image.mount``, served by background threads of
    this process (the library's in-process mount, not a daemon) until it is unmounted.

    Every read through the mount is checked as the image was opened to check it; a block that
    fails its check fails that read with ``EIO`` (and is logged once), other files read fine.
    Usable as a context manager (unmounted on exit). A ``Mount`` collected while still mounted
    is detached as ``unmount`` does; one inherited by a forked child is left to its parent.
    """

    def __init__(self, native: Any):
        self._n = native

    @property
    def mountpoint(self) -> str:
        """Where the image is mounted (canonical)."""
        return os.fsdecode(self._n.mountpoint)

    @property
    def mounted(self) -> bool:
        """Whether it is still mounted (not unmounted, not taken down from outside)."""
        return bool(self._n.mounted)

    def stats(self) -> Dict[str, Any]:
        """The mount's counters, as ``sealfs stats --json`` prints them: requests, bytes read and
        verified, failed reads, cache hits, what reads are checked against (``trust``)."""
        stats: Dict[str, Any] = json.loads(self._n.stats())
        return stats

    def unmount(self) -> None:
        """Unmounts it, or, when files are open on it (``EBUSY``), detaches it lazily: it leaves
        the file system tree at once and the files open keep working until closed. Never waits
        for those files (a thread of this process may hold them); the threads that served the
        mount end once the last is closed (with nothing open, they have ended on return). Unmounting again does nothing. Raises ``OSError`` when
        the system refuses (``EPERM``)."""
        self._n.unmount()

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.unmount()

    def __fspath__(self) -> str:
        return self.mountpoint

    def __repr__(self) -> str:
        state = "mounted" if self.mounted else "unmounted"
        return f"<sealfs.Mount {self.mountpoint!r} {state}>"


def mount_options(
    options: Union[None, str, Sequence[str]],
    allow_other: bool,
    allow_root: bool,
) -> str:
    """The ``-o`` list of ``Image.mount``'s arguments."""
    parts: List[str]
    if options is None:
        parts = []
    elif isinstance(options, str):
        parts = [options]
    else:
        parts = list(options)
    if allow_other:
        parts.append("allow_other")
    if allow_root:
        parts.append("allow_root")
    return ",".join(p for p in parts if p)


def log_path(log: Optional[Union[str, "os.PathLike[str]"]]) -> Optional[str]:
    """``Image.mount``'s ``log`` as a path string."""
    return None if log is None else os.fsdecode(log)
