"""Issue 38, item 21: the package's types are precise enough for ``mypy --strict`` (installed from
PyPI: the checker is the oracle) to accept correct use and catch misuse (``Image.open()``
returned ``Any`` and ``listdir`` ``list[Any]``, so misuse passed); ``dir(sealfs)`` shows the API,
not the helpers its modules import."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import sealfs

GOOD = """
import io
from typing import Iterator, List, Tuple
import sealfs

def use(img: sealfs.Image) -> None:
    f: sealfs.SealedFile = img.open("/a")
    data: bytes = f.read()
    t: io.TextIOWrapper = img.open("/a", "r")
    text: str = t.read()
    names: List[str] = img.listdir("/")
    raw: List[bytes] = img.listdir(b"/")
    target: str = img.readlink("/l")
    for top, dirs, files in img.walk("/"):
        first: str = top
    for btop, bdirs, bfiles in img.walk(b"/"):
        bfirst: bytes = btop
    with img.mount("/mnt", allow_other=True, options=["nodev"], threads=2) as m:
        where: str = m.mountpoint
        up: bool = m.mounted
        trust: str = m.stats()["trust"]
    m.unmount()

img = sealfs.open("x.img", digest="sha256:00", fill="off")
use(img)
"""

BAD = {
    "binary_read_used_as_text": 'img.open("/a").read() + "s"',
    "text_read_used_as_bytes": 'img.open("/a", "r").read() + b"s"',
    "str_names_used_as_bytes": 'x: List[bytes] = img.listdir("/")',
    "bytes_names_used_as_str": 'y: List[str] = img.listdir(b"/")',
    "keyword_argument_given_positionally": 'sealfs.open("x.img", "sha256:00")',
    "unknown_fill_policy": 'sealfs.open("x.img", fill="always")',
    "walk_names_used_as_bytes": 'z: List[bytes] = next(img.walk("/"))[1]',
    "unknown_xattrs_policy": 'img.mount("/mnt", xattrs="maybe")',
    "mount_option_given_positionally": 'img.mount("/mnt", True)',
}


def mypy(tmp_path, name: str, code: str) -> subprocess.CompletedProcess:
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )


def test_mypy_strict_accepts_correct_use(tmp_path):
    out = mypy(tmp_path, "good", GOOD)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("name", sorted(BAD))
def test_mypy_strict_catches_misuse(tmp_path, name):
    code = "from typing import List\nimport sealfs\nimg = sealfs.open('x.img', digest='sha256:00')\n"
    out = mypy(tmp_path, name, code + textwrap.dedent(BAD[name]) + "\n")
    assert out.returncode == 1 and f"{name}.py:4: error" in out.stdout, out.stdout + out.stderr


def test_dir_shows_the_api_only():
    extra = [n for n in dir(sealfs) if not n.startswith("_") and n not in sealfs.__all__]
    assert extra == [], f"dir(sealfs) shows {extra}"
    assert set(sealfs.__all__) <= set(dir(sealfs))
