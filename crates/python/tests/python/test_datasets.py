"""Hugging Face ``datasets`` loads files inside a local and a remote image (nginx) through the
``sealfs`` fsspec protocol: a Parquet file prepared into its Arrow cache, and a CSV file streamed.
Expected values are the pandas frame the files were written from (``test_fsspec.data``)."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from conftest import WORK
from test_fsspec import data, locations  # noqa: F401  (the module-scoped fixture and its places)

# datasets reads these when it is imported: its caches under the suite's work directory, and
# nothing sent anywhere (the machine has no network beyond package registries).
os.environ["HF_HOME"] = str(WORK / "huggingface")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"


@pytest.mark.parametrize("where", ["local", "http"])
def test_datasets_loads_parquet_and_streams_csv_from_an_image(data, where, tmp_path):  # noqa: F811
    import datasets

    opts = {"image": dict(locations(data))[where], "digest": data["digest"],
            "cache_dir": str(tmp_path / "cache")}
    ds = datasets.load_dataset(
        "parquet",
        data_files={"train": "sealfs://data/nested/train.parquet"},
        storage_options=opts,
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    assert ds.num_rows == len(data["df"])
    pd.testing.assert_frame_equal(ds.to_pandas(), data["df"])

    streamed = datasets.load_dataset(
        "csv",
        data_files="sealfs://data/train.csv",
        storage_options=opts,
        split="train",
        streaming=True,
    )
    got = pd.DataFrame(list(streamed))
    pd.testing.assert_frame_equal(got, data["df"], check_dtype=False)
