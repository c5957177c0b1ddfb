"""The ``sealfs`` fsspec protocol (registered by the package's entry point): pandas, pyarrow and
DuckDB read a CSV and a Parquet file inside a local and a remote image (nginx) as they were written;
``zipfile`` and ``tarfile`` read archives inside an image through ``Image.open``."""

from __future__ import annotations

import io
import pickle
import shutil
import tarfile
import zipfile

import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sealfs
from sealfs.fsspec import SealFileSystem
from conftest import HTTP, WWW


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tree written by pandas, pyarrow, zipfile and tarfile, built into an image by
    ``sealfs.build`` and served by nginx too."""
    root = tmp_path_factory.mktemp("data")
    src = root / "src"
    (src / "data" / "nested").mkdir(parents=True)
    rng = np.random.default_rng(31)
    df = pd.DataFrame(
        {
            "id": np.arange(50_000),
            "x": rng.normal(size=50_000),
            "label": rng.choice(["cat", "dog", "bird"], size=50_000),
        }
    )
    df.to_csv(src / "data" / "train.csv", index=False)
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table, src / "data" / "nested" / "train.parquet", row_group_size=10_000)
    with zipfile.ZipFile(src / "data" / "a.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("inside/one.txt", "one\n" * 1000)
        z.writestr("two.bin", bytes(range(256)) * 100)
    with tarfile.open(src / "data" / "b.tar", "w") as t:
        t.add(src / "data" / "train.csv", arcname="train.csv")
    image = root / "data.img"
    built = sealfs.build(src, image, compression="zstd,6", pcluster_bytes=65536)
    assert built["digest"].startswith("sha256:") and built["files"] >= 4
    shutil.copy(image, WWW / "data.img")
    return {"df": df, "table": table, "image": str(image), "digest": built["digest"], "src": src}


def locations(data):
    return [("local", data["image"]), ("http", HTTP + "data.img")]


def test_the_protocol_is_registered_by_entry_point():
    assert fsspec.get_filesystem_class("sealfs") is SealFileSystem


@pytest.mark.parametrize("where", ["local", "http"])
def test_pandas_and_pyarrow_read_from_an_image(data, where, tmp_path):
    image = dict(locations(data))[where]
    opts = {"image": image, "digest": data["digest"], "cache_dir": str(tmp_path / "cache")}
    df = pd.read_csv("sealfs://data/train.csv", storage_options=opts)
    pd.testing.assert_frame_equal(df, data["df"])
    with fsspec.open("sealfs://data/train.csv", **opts) as f:
        pd.testing.assert_frame_equal(pd.read_csv(f), data["df"])
    fs = fsspec.filesystem("sealfs", **opts)
    # use_threads=False: pyarrow's threads that read through a Python file system may outlive
    # the read and abort the interpreter at exit ("terminate called without an active
    # exception", apache/arrow#34314, #39162; fsspec's own DirFileSystem over local files does it
    # too), which would fail the suite after every test passed.
    table = pq.read_table("data/nested/train.parquet", filesystem=fs, use_threads=False)
    assert table.equals(data["table"])
    with fs.open("data/nested/train.parquet") as f:
        assert pq.read_table(f, use_threads=False).equals(data["table"])
    # Row groups read at offsets (pyarrow seeks).
    pf = pq.ParquetFile(fs.open("/data/nested/train.parquet"))
    assert pf.read_row_group(3, use_threads=False).equals(data["table"].slice(30_000, 10_000))
    # Listing, info, ranges, walking.
    assert sorted(fs.ls("data", detail=False)) == ["data/a.zip", "data/b.tar", "data/nested", "data/train.csv"]
    info = fs.info("sealfs://data/train.csv")
    assert info["type"] == "file" and info["size"] == (data["src"] / "data" / "train.csv").stat().st_size
    assert fs.info("data/nested")["type"] == "directory"
    raw = (data["src"] / "data" / "train.csv").read_bytes()
    assert fs.cat_file("data/train.csv", start=100, end=2000) == raw[100:2000]
    assert fs.cat_file("data/train.csv", start=-50) == raw[-50:]
    assert sorted(fs.find("")) == ["data/a.zip", "data/b.tar", "data/nested/train.parquet", "data/train.csv"]
    assert fs.exists("data/train.csv") and not fs.exists("data/none.csv")
    with pytest.raises(FileNotFoundError):
        fs.open("data/none.csv")
    with pytest.raises(PermissionError):
        fs.open("data/new.csv", "wb")
    # The file system pickles by its options: the copy opens the same image.
    again = pickle.loads(pickle.dumps(fs))
    assert again.cat_file("data/train.csv") == raw


@pytest.mark.parametrize("where", ["local", "http"])
def test_duckdb_queries_files_in_an_image(data, where, tmp_path):
    import duckdb

    image = dict(locations(data))[where]
    fs = fsspec.filesystem(
        "sealfs", image=image, digest=data["digest"], cache_dir=str(tmp_path / "cache")
    )
    con = duckdb.connect()
    con.register_filesystem(fs)
    df = data["df"]
    n, total, cats = con.execute(
        "SELECT count(*), sum(id), count(*) FILTER (WHERE label = 'cat') "
        "FROM read_parquet('sealfs://data/nested/train.parquet')"
    ).fetchone()
    assert (n, total, cats) == (len(df), int(df["id"].sum()), int((df["label"] == "cat").sum()))
    got = con.execute("SELECT * FROM read_csv('sealfs://data/train.csv') ORDER BY id").df()
    pd.testing.assert_frame_equal(got, df, check_dtype=False)
    con.close()


def test_zipfile_and_tarfile_read_through_image_open(data):
    img = sealfs.open(data["image"], digest=data["digest"])
    with zipfile.ZipFile(img.open("/data/a.zip")) as z:
        assert z.read("inside/one.txt") == b"one\n" * 1000
        assert z.read("two.bin") == bytes(range(256)) * 100
    with tarfile.open(fileobj=img.open("/data/b.tar")) as t:
        assert t.extractfile("train.csv").read() == (data["src"] / "data" / "train.csv").read_bytes()
    with io.BufferedReader(img.open("/data/train.csv")) as f:
        assert f.readline() == b"id,x,label\n"
    with img.open("data/train.csv", "r") as f:
        assert f.readline() == "id,x,label\n"
