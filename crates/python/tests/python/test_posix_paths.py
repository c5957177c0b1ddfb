"""Issue 38, item 20: paths resolve as POSIX (and Python's ``os``) resolve them. ``"/FILE/"`` and
``"/FILE/."`` opened the file (``os``: ``NotADirectoryError``), ``""`` was the root (``os``:
``FileNotFoundError``), ``"a\\0b"`` raised ``FileNotFoundError`` (``os``: ``ValueError``).

Every expected outcome is what ``os`` does on the source tree the image was built from: the same
path, the same call, the same exception type or the same answer."""

from __future__ import annotations

import os
import stat
from typing import Any, Callable, List, Tuple

import pytest

from conftest import SRC, image_by_name, open_spec


def _pick(pred: Callable[[str], bool]) -> List[str]:
    """Up to one path below the source's root (relative, str) for which ``pred`` holds."""
    for dirpath, dirnames, filenames in os.walk(SRC):
        for n in sorted(filenames + dirnames):
            rel = os.path.relpath(os.path.join(dirpath, n), SRC)
            if pred(os.path.join(SRC, rel)):
                return [rel]
    return []


def _paths() -> List[str]:
    file = _pick(lambda p: stat.S_ISREG(os.lstat(p).st_mode))
    dir_ = _pick(lambda p: stat.S_ISDIR(os.lstat(p).st_mode))
    # Symlinks whose target stays in the tree (the host would follow others out of it).
    inside = lambda p: os.path.realpath(p).startswith(os.path.realpath(SRC) + os.sep)
    link_file = _pick(lambda p: os.path.islink(p) and os.path.isfile(p) and inside(p))
    link_dir = _pick(lambda p: os.path.islink(p) and os.path.isdir(p) and inside(p))
    assert file and dir_, "the fixture has a file and a directory"
    out = ["", "/", ".", "/.", "//", "missing", "missing/"]
    for base in file + dir_ + link_file + link_dir:
        for suffix in ["", "/", "/.", "/..", "//", "/./", "/x", "/../" + base]:
            out.append(base + suffix)
        out.append("./" + base)
    f = file[0]
    out += [f + "\0", "\0" + f, f[:1] + "\0" + f[1:]]
    return out


def _host(path: str) -> str:
    """The same path in the source tree (``""`` stays ``""``, as it names nothing)."""
    return "" if path == "" else os.path.join(str(SRC), path.lstrip("/"))


def _outcome(call: Callable[[], Any]) -> Tuple[str, Any]:
    try:
        return ("ok", call())
    except (OSError, ValueError) as e:
        return (type(e).__name__, None)


def _st(s: os.stat_result) -> Tuple[int, int]:
    return (s.st_mode, s.st_size if stat.S_ISREG(s.st_mode) else 0)


@pytest.mark.parametrize("path", _paths())
def test_paths_resolve_as_os_does(path):
    img = open_spec(image_by_name("local-plain"))
    host = _host(path)
    checks = {
        "stat": (lambda: _st(img.stat(path)), lambda: _st(os.stat(host))),
        "lstat": (lambda: _st(img.lstat(path)), lambda: _st(os.lstat(host))),
        "listdir": (lambda: sorted(img.listdir(path)), lambda: sorted(os.listdir(host))),
        "open": (lambda: img.open(path).read(), lambda: open(host, "rb").read()),
        "exists": (lambda: img.exists(path), lambda: os.path.exists(host)),
        "isdir": (lambda: img.isdir(path), lambda: os.path.isdir(host)),
        "isfile": (lambda: img.isfile(path), lambda: os.path.isfile(host)),
        "islink": (lambda: img.islink(path), lambda: os.path.islink(host)),
    }
    wrong = []
    for name, (ours, theirs) in checks.items():
        got, want = _outcome(ours), _outcome(theirs)
        # os.open of a directory is IsADirectoryError; so must ours be.
        if got != want:
            wrong.append(f"{name}({path!r}): sealfs {got[0]} {got[1]!r}, os {want[0]} {want[1]!r}")
    assert not wrong, "\n".join(wrong)
