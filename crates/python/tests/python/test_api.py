"""The rest of the API: trust and refused opens, errors and their classes, build, digest and verify
(the same report as ``sealfs verify --json``, digests equal to ``fsverity digest``'s), extract,
pickling, type stubs and ``help(sealfs)``."""

from __future__ import annotations

import ast
import errno
import json
import os
import pickle
import pydoc
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

import sealfs
from conftest import (
    HTTP,
    KEY,
    KEY_PUB,
    SRC,
    WWW,
    build_cli,
    ci,
    image_by_name,
    open_spec,
    regular_files,
    sealfs_cli,
)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small tree, with a symlink, an xattr and a nested directory."""
    root = tmp_path_factory.mktemp("small")
    src = root / "src"
    (src / "etc").mkdir(parents=True)
    (src / "etc" / "hostname").write_text("sealed\n")
    (src / "etc" / "link").symlink_to("hostname")
    (src / "bin").mkdir()
    (src / "bin" / "tool").write_bytes(b"\x7fELF" + bytes(5000))
    os.chmod(src / "bin" / "tool", 0o755)
    try:
        os.setxattr(src / "etc" / "hostname", "user.note", b"hello")
        xattrs = True
    except OSError:
        xattrs = False
    return {"root": root, "src": src, "xattrs": xattrs}


def test_trust_says_who_vouched(small, tmp_path):
    img_path = tmp_path / "a.img"
    built = sealfs.build(small["src"], img_path, key=KEY, name="small", version="1")
    digest = built["digest"]
    assert built["signed_by"].startswith("ed25519:")

    by_digest = sealfs.open(img_path, digest=digest).trust
    assert (by_digest.state, by_digest.authority, by_digest.digest) == ("authenticated", "digest", digest)
    assert by_digest.authenticated and by_digest.verified and by_digest.checker == "reader"
    assert str(by_digest) == f"authenticated (digest given): {digest}"

    by_key = sealfs.open(img_path, key=KEY_PUB).trust
    assert (by_key.state, by_key.authority) == ("authenticated", "key")
    assert by_key.key_fingerprint == built["signed_by"]

    # The version floor: version 1 is refused below a floor of 2 (a rollback), accepted at 1.
    with pytest.raises(sealfs.SignatureError, match="rollback"):
        sealfs.open(img_path, key=KEY_PUB, min_version="2")
    assert sealfs.open(img_path, key=KEY_PUB, min_version="1").trust.authenticated
    assert not sealfs.verify(img_path, key=KEY_PUB, min_version="2")["verified"]

    ring = tmp_path / "ring"
    ring.mkdir()
    shutil.copy(KEY_PUB, ring / "release.pub")
    assert sealfs.open(img_path, keyring=ring).trust.key_fingerprint == built["signed_by"]

    own = sealfs.open(img_path).trust
    assert (own.state, own.digest, own.authenticated) == ("self-consistent", digest, False)
    assert sealfs.open(img_path, verify="none").trust.state == "unverified"

    plain = tmp_path / "plain.img"
    assert sealfs.build(small["src"], plain, seal=False)["digest"] is None
    assert sealfs.open(plain).trust.state == "unverified"


def test_refused_opens_have_their_own_classes(small, tmp_path):
    img_path = tmp_path / "a.img"
    digest = sealfs.build(small["src"], img_path)["digest"]
    other = "sha256:" + "0" * 64
    with pytest.raises(sealfs.DigestMismatchError) as caught:
        sealfs.open(img_path, digest=other)
    e = caught.value
    assert isinstance(e, sealfs.OpenRefusedError) and not isinstance(e, OSError)
    assert (e.expected, e.actual) == (other, digest)
    # Signed by nobody: refused with keys.
    with pytest.raises(sealfs.SignatureError):
        sealfs.open(img_path, key=KEY_PUB)
    # A URL without digest or key is refused before any request; accepted by name.
    shutil.copy(img_path, WWW / "unsigned.img")
    with pytest.raises(sealfs.OpenRefusedError, match="self-consistent"):
        sealfs.open(HTTP + "unsigned.img", cache=False)
    img = sealfs.open(HTTP + "unsigned.img", self_consistent=True, cache=False)
    assert img.trust.state == "self-consistent"
    assert img.read_text("/etc/hostname") == "sealed\n"
    # A digest for an unsealed image cannot be checked while reading.
    plain = tmp_path / "plain.img"
    sealfs.build(small["src"], plain, seal=False)
    with pytest.raises(sealfs.OpenRefusedError):
        sealfs.open(plain, digest=digest)
    with pytest.raises(ValueError):
        sealfs.open(img_path, digest="sha256:xyz")
    with pytest.raises(FileNotFoundError):
        sealfs.open(tmp_path / "missing.img")
    junk = tmp_path / "junk.img"
    junk.write_bytes(os.urandom(20000))
    with pytest.raises(sealfs.CorruptedImageError):
        sealfs.open(junk)


def test_errors_are_the_kernels(small, tmp_path):
    img = sealfs.open(sealfs_image(small, tmp_path))
    cases = [
        (lambda: img.stat("/nope"), FileNotFoundError, errno.ENOENT),
        (lambda: img.read_bytes("/etc/nope"), FileNotFoundError, errno.ENOENT),
        (lambda: img.listdir("/etc/hostname"), NotADirectoryError, errno.ENOTDIR),
        (lambda: img.stat("/etc/hostname/x"), NotADirectoryError, errno.ENOTDIR),
        (lambda: img.open("/etc"), IsADirectoryError, errno.EISDIR),
        (lambda: img.readlink("/etc/hostname"), OSError, errno.EINVAL),
        (lambda: img.getxattr("/etc/hostname", "user.absent"), OSError, errno.ENODATA),
    ]
    for call, cls, code in cases:
        with pytest.raises(cls) as caught:
            call()
        assert caught.value.errno == code, caught.value
    e = pytest.raises(FileNotFoundError, img.stat, "/nope").value
    assert e.filename == "/nope" and "No such file or directory" in str(e)
    with pytest.raises(ValueError):
        img.open("/etc/hostname", "wb")
    f = img.open("/etc/hostname")
    img.close()
    with pytest.raises(ValueError):
        img.listdir("/")
    assert f.read() == b"sealed\n", "files opened before close stay readable"


def sealfs_image(small, tmp_path) -> Path:
    out = tmp_path / "small.img"
    if not out.exists():
        sealfs.build(small["src"], out)
    return out


def test_paths_names_and_attributes(small, tmp_path):
    img = sealfs.open(sealfs_image(small, tmp_path))
    assert sorted(img.listdir("/")) == ["bin", "etc"]
    assert sorted(img.listdir(b"/etc")) == [b"hostname", b"link"]
    assert img.readlink("/etc/link") == "hostname" and img.readlink(b"etc/link") == b"hostname"
    st = img.stat("/etc/link")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 7
    assert stat.S_ISLNK(img.lstat("/etc/link").st_mode)
    assert img.stat("bin/tool").st_mode & 0o777 == 0o755
    src_st = os.stat(small["src"] / "bin" / "tool")
    assert img.stat("/bin/tool").st_mtime_ns == src_st.st_mtime_ns
    assert img.exists("/etc/link") and not img.exists("/etc/nope")
    assert img.isdir("/etc") and img.isfile("/etc/link") and img.islink("/etc/link")
    if small["xattrs"]:
        assert img.listxattr("/etc/hostname") == ["user.note"]
        assert img.getxattr("/etc/hostname", "user.note") == b"hello"
        assert img.getxattr("/etc/link", b"user.note") == b"hello"  # followed
        assert img.listxattr("/etc/link", follow_symlinks=False) == []
    entries = {e.name: e for e in img.scandir("/etc")}
    assert entries["link"].is_symlink() and entries["link"].is_file()
    assert not entries["link"].is_file(follow_symlinks=False)
    assert entries["hostname"].stat().st_size == 7 and os.fspath(entries["hostname"]) == "/etc/hostname"
    walked = list(img.walk("/"))
    assert walked[0][0] == "/" and sorted(walked[0][1]) == ["bin", "etc"] and walked[0][2] == []
    assert {p for p, _, _ in walked} == {"/", "/bin", "/etc"}
    bottom_up = [p for p, _, _ in img.walk("/", topdown=False)]
    assert bottom_up[-1] == "/"
    # Pruning, as os.walk allows.
    seen = []
    for p, d, f in img.walk("/"):
        seen.append(p)
        d[:] = [x for x in d if x != "bin"]
    assert "/bin" not in seen
    with img.open("/bin/tool") as f:
        assert f.size == 5004 and f.seek(0, os.SEEK_END) == 5004
        f.seek(4)
        assert f.read(3) == b"\0\0\0" and f.tell() == 7
        buf = bytearray(10)
        f.seek(0)
        assert f.readinto(memoryview(buf)[2:6]) == 4 and bytes(buf[2:6]) == b"\x7fELF"
        assert f.pread(4, 0) == b"\x7fELF" and f.tell() == 4
        # At the end: what is left, then 0, the buffer past it untouched.
        tool = (small["src"] / "bin" / "tool").read_bytes()
        f.seek(5000)
        buf = bytearray(b"x" * 10)
        assert f.readinto(buf) == 4 and bytes(buf) == tool[5000:] + b"xxxxxx"
        assert f.readinto(buf) == 0 and f.tell() == 5004
        f.seek(6000)
        assert f.readinto(buf) == 0 and f.read() == b"" and f.tell() == 6000
        with pytest.raises(io_unsupported()):
            f.fileno()
    assert img.stats["verified_blocks"] > 0


def io_unsupported():
    import io

    return io.UnsupportedOperation


def test_build_digest_and_verify_agree_with_the_cli_and_fsverity(small, tmp_path):
    out = tmp_path / "b.img"
    built = sealfs.build(small["src"], out, compression="lz4hc,9", pcluster_bytes=65536)
    assert sealfs.digest(out) == built["digest"]
    # The CLI's build of the same tree with the same options is the same image.
    cli = tmp_path / "cli.img"
    assert build_cli(small["src"], cli, "-z", "lz4hc,9", "-C", "65536") == built["digest"]
    assert cli.read_bytes() == out.read_bytes()
    # The same report as `sealfs verify --json`.
    for args, kwargs in [([], {}), (["--digest", built["digest"]], {"digest": built["digest"]})]:
        report = sealfs.verify(out, **kwargs)
        printed = json.loads(sealfs_cli("verify", "--json", *args, str(out)).stdout)
        printed["image"] = report["image"]
        assert report == printed
    assert report["verified"] and report["authenticated"]
    # A plain image's digest is what fsverity (fsverity-utils) computes for the whole file.
    plain = tmp_path / "plain.img"
    sealfs.build(small["src"], plain, seal=False)
    if shutil.which("fsverity") is None:
        assert not ci(), "fsverity not installed, and CI=true forbids skipping"
        pytest.skip("fsverity not installed (Debian package fsverity)")
    printed = subprocess.run(["fsverity", "digest", str(plain)], capture_output=True, check=True)
    assert printed.stdout.split()[0].decode() == sealfs.digest(plain)
    with pytest.raises(ValueError):
        sealfs.build(small["src"], tmp_path / "x.img", compression="snappy")
    with pytest.raises(FileNotFoundError):
        sealfs.build(tmp_path / "nothing", tmp_path / "x.img")
    assert not (tmp_path / "x.img").exists()


def test_verify_checks_keys_and_remote_images(small, tmp_path):
    spec = image_by_name("http-lz4hc")
    report = sealfs.verify(spec["location"], key=spec["key"])
    assert report["verified"] and report["authenticated"], report
    assert report["signed_by"].startswith("ed25519:")
    shutil.copy(sealfs_image(small, tmp_path), WWW / "small.img")
    wrong = sealfs.verify(HTTP + "small.img", digest="sha256:" + "1" * 64)
    assert not wrong["verified"] and wrong["problems"][0]["kind"] == "digest", wrong


def test_extract_writes_the_tree(tree, tmp_path):
    img = open_spec(image_by_name("local-lz4hc"))
    dest = tmp_path / "out"
    summary = img.extract(dest)
    assert summary["outcome"] in ("complete", "not-restored") and not summary["errors"], summary
    for rel in regular_files(tree, 16 << 20):
        with open(tree[rel].path, "rb") as f:
            assert (Path(os.fsdecode(os.fsencode(dest) + rel))).read_bytes() == f.read(), rel
    for rel, e in tree.items():
        if e.target is not None:
            assert os.readlink(os.fsencode(dest) + rel) == e.target
    with pytest.raises(OSError) as caught:
        img.extract(dest)
    assert caught.value.errno == errno.ENOTEMPTY


def test_images_pickle_and_insist_on_their_digest(small, tmp_path):
    path = tmp_path / "p.img"
    digest = sealfs.build(small["src"], path)["digest"]
    img = sealfs.open(path, digest=digest)
    again = pickle.loads(pickle.dumps(img))
    assert again.trust.state == "authenticated" and again.read_text("/etc/hostname") == "sealed\n"
    # Self-consistent: the copy must find the same digest; another image at the path is refused.
    own = sealfs.open(path)
    blob = pickle.dumps(own)
    (small["src"] / "etc" / "hostname").write_text("changed\n")
    sealfs.build(small["src"], path)
    (small["src"] / "etc" / "hostname").write_text("sealed\n")
    with pytest.raises(sealfs.OpenRefusedError):
        pickle.loads(blob)


def test_type_stubs_name_what_the_module_has():
    stub = Path(sealfs._native.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    names = {
        n.name
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.ClassDef))
    } | {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    actual = {n for n in dir(sealfs._native) if not n.startswith("__")} | {"__version__"}
    assert names == actual, (names ^ actual)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {m.name for m in cls.body if isinstance(m, ast.FunctionDef)}
        have = {m for m in dir(getattr(sealfs._native, cls.name)) if not m.startswith("_")}
        assert methods == have, (cls.name, methods ^ have)
    assert (Path(sealfs.__file__).parent / "py.typed").exists()


def test_help_reads_well():
    text = pydoc.render_doc(sealfs, renderer=pydoc.plaintext)
    for name in ("open", "build", "digest", "verify", "Image", "VerificationError", "fsspec"):
        assert name in text
    for obj in (sealfs.open, sealfs.build, sealfs.verify, sealfs.digest, sealfs.Image.open,
                sealfs.Image.walk, sealfs.SealedFile, sealfs.Trust, sealfs.VerificationError):
        assert obj.__doc__ and len(obj.__doc__) > 40, obj
