"""The format registry (tasks/convert/formats.py): one table decides detection by suffix,
which formats are cut into slices, and the reader."""

import pytest

from shardline.tasks.batch import Source
from shardline.tasks.convert.formats import FORMATS, format_of, group_root, read_source, splitter
from shardline.tasks.convert.readers import Unreadable
from shardline.tasks.convert.split import Part


@pytest.mark.parametrize(("key", "fmt"), [
    ("in/a.jsonl", "jsonl"), ("in/a.NDJSON", "jsonl"), ("in/a.json", "jsonl"),
    ("in/a.csv", "csv"), ("in/a.parquet", "parquet"), ("in/a.pq", "parquet"),
    ("in/cat/a.png", "image"), ("in/cat/a.JPG", "image"), ("in/cat/a.jpeg", "image"),
    ("in/a.bmp", "unknown"), ("in/c/x.tif", "image"), ("in/c/t.npy", "npy"),
    ("in/README", "unknown"),
])
def test_detection_by_suffix(key: str, fmt: str) -> None:
    assert format_of(key) == fmt


def test_a_zarr_folder_is_one_source() -> None:
    assert group_root("in/x/g.zarr/images/0.0.0") == ("in/x/g.zarr/", "zarr")
    assert group_root("in/g.zarr") is None          # an object named .zarr is no group
    assert format_of("in/g.zarr") == "unknown"


def test_only_jsonl_parquet_and_zarr_are_cut() -> None:
    # zarr: a typed group only (split_zarr keeps the shorthand's groups whole)
    assert {f for f in FORMATS if splitter(f) is not None} == {"jsonl", "parquet", "zarr"}
    assert splitter("csv") is None and splitter("unknown") is None
    # a format that can be cut can also read a slice
    assert all(f.read_slice is not None for f in FORMATS.values() if f.split is not None)


def test_unknown_format_names_what_to_upload() -> None:
    part = Part.of(Source("in/a.bmp", "e", 3, "unknown"))
    with pytest.raises(Unreadable) as err:
        next(read_source(None, part, None))  # type: ignore[arg-type]
    assert err.value.rule == "unreadable_object"
    assert err.value.message == ("unsupported file type .bmp; upload .jsonl, .csv, .parquet, "
                                 ".png/.jpg (ImageFolder), a .zarr group or .npy (a tensor "
                                 "field)")
