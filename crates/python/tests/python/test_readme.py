"""The README's Python example runs as written, against an image holding /etc/hostname at
OUT.img (its placeholder digest replaced by the image's)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import sealfs
from conftest import need


def test_the_readme_example_runs(tmp_path):
    readme = open(need("SEALFS_TEST_README"), encoding="utf-8").read()
    assert readme.count("```python\n") == 1, "one Python example"
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    code = textwrap.dedent("\n".join(line for line in block.split("\n") if line.strip()))
    assert len(code.splitlines()) == 5, code
    (tmp_path / "tree" / "etc").mkdir(parents=True)
    (tmp_path / "tree" / "etc" / "hostname").write_text("sealed-host\n")
    digest = sealfs.build(tmp_path / "tree", tmp_path / "OUT.img")["digest"]
    placeholder = next(p for p in code.split('"') if p.startswith("sha256:"))
    out = subprocess.run(
        [sys.executable, "-c", code.replace(placeholder, digest)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    assert f"authenticated (digest given): {digest}" in out.stdout
    assert "sealed-host" in out.stdout and "['hostname']" in out.stdout
