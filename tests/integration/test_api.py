"""The public Python API against a real S3 server (moto): open any version as Arrow, pandas
or torch; list versions; quarantine; diff. Every row of a version read exactly once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

import shardline
from shardline.core.config import StoreSettings
from shardline.core.errors import ConfigError, StoreError
from shardline.core.store import ObjectStore
from tests.integration.api_data import REJECTS, SPLITS, Published, publish_three
from tests.integration.trainer_data import digits

ALL = np.concatenate(SPLITS)


@pytest.fixture
def published(store: ObjectStore, tmp_path: Path) -> Published:
    return publish_three(store, str(tmp_path / "cache"))


def _ids(rows: np.ndarray) -> list[str]:
    ids, _, _ = digits()
    return sorted(ids[i] for i in rows)


def test_open_in_two_lines_from_the_environment(published: Published, stack_env: StoreSettings,
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("SHARDLINE_HOME", str(tmp_path / "no-stack"))
    ds = shardline.open_dataset(published.cfg.dataset.name)
    table = ds.to_table()
    assert ds.version == 3 and table.num_rows == len(ALL) == ds.rows
    assert sorted(table.column("id").to_pylist()) == _ids(ALL)
    # the label= folders of versions 1-2 do not turn into a second, int32 label column
    assert table.schema.field("label").type == pa.int16()
    assert table.schema.names == ["id", "label", "image", "source_key", "source_row"]


def test_any_version_is_pinned(published: Published, store: ObjectStore) -> None:
    name = published.cfg.dataset.name
    v1 = shardline.open_dataset(name, version=1, store=store)
    assert sorted(v1.to_table(columns=["id"]).column("id").to_pylist()) == _ids(SPLITS[0])
    v2 = shardline.open_dataset(name, 2, bucket=store.bucket, access_key="testing",
                                secret_key="testing", endpoint_url=store.settings.endpoint_url)
    assert v2.to_table().num_rows == len(SPLITS[0]) + len(SPLITS[1])
    assert v2.to_table(new_only=True).num_rows == len(SPLITS[1])
    with pytest.raises(StoreError, match=r"version 9 does not exist.*the latest is 3"):
        shardline.open_dataset(name, 9, store=store)


def test_pandas_pyarrow_dataset_and_images(published: Published, store: ObjectStore) -> None:
    ds = shardline.open_dataset(published.cfg, store=store)
    df = ds.to_pandas(columns=["id", "label"], label_names=True)
    assert len(df) == len(ALL) and set(df["class"]) == set(ds.classes)
    assert (df["class"] == df["label"].astype(str)).all()
    dataset = ds.to_dataset()
    assert dataset.count_rows() == len(ALL)
    threes = dataset.to_table(filter=pc.field("label") == 3)
    _, labels, images = digits()
    assert threes.num_rows == int((labels[ALL] == 3).sum())
    pixels = ds.images(threes)
    assert pixels.shape == (threes.num_rows, 8, 8, 1) and pixels.dtype == np.uint8
    first = int(threes.column("source_row")[0].as_py())
    assert np.array_equal(pixels[0].reshape(-1), images[first])


def test_versions_diff_and_quarantine(published: Published, store: ObjectStore) -> None:
    name = published.cfg.dataset.name
    versions = shardline.list_dataset_versions(name, store=store)
    assert [v["version"] for v in versions] == [3, 2, 1]
    assert [v["new_rows"] for v in versions] == [len(s) for s in reversed(SPLITS)]
    assert versions[0]["quarantined"] == len(REJECTS)

    v1 = shardline.open_dataset(name, 1, store=store)
    d = v1.diff(3)
    assert (d.from_version, d.to_version, d.rows_added, d.rows_removed) == (
        1, 3, len(SPLITS[1]) + len(SPLITS[2]), 0)
    assert len(d.added_batches) == 2 and d.removed == []
    assert d.to_dict()["shards_added"] == [s.path for s in d.added]

    q = shardline.open_dataset(name, 3, store=store).quarantine()
    got = sorted(zip(q.column("source_row").to_pylist(), q.column("rule").to_pylist(),
                     strict=True))
    assert got == sorted((r, rule) for _, r, _, rule, _ in REJECTS)
    assert v1.quarantine().num_rows == 0
    assert shardline.open_dataset(name, 3, store=store).quarantine(all_batches=True
                                                                   ).num_rows == len(REJECTS)


def _keys(batches: list[dict[str, torch.Tensor]]) -> list[int]:
    return [int(k) for b in batches for k in b["key"]]


def test_torch_loader_reads_every_row_once_resumes_and_splits_ranks(
        published: Published, store: ObjectStore) -> None:
    ds = shardline.open_dataset(published.cfg, store=store)
    with ds.torch_loader(batch_size=64, seed=1) as loader:
        batches = list(loader)
    keys = _keys(batches)
    assert len(keys) == len(set(keys)) == ds.rows            # one epoch: every row once
    assert batches[0]["image"].shape == (64, 1, 8, 8) and batches[0]["image"].dtype == torch.uint8
    assert Counter(int(x) for b in batches for x in b["label"]) == Counter(
        digits()[1][ALL].tolist())

    with ds.torch_loader(batch_size=64, seed=1) as first:    # resume mid-epoch
        it = iter(first)
        head = [next(it) for _ in range(5)]
        state = first.state_dict()
    with ds.torch_loader(batch_size=64, seed=1) as second:
        second.load_state_dict(state)
        tail = list(second)
    assert _keys(head) + _keys(tail) == keys

    shares = []
    for rank in (0, 1):
        with ds.torch_loader(batch_size=50, seed=1, rank=rank, world=2) as part:
            shares.append(set(_keys(list(part))))
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(keys)


def test_torch_splits_and_fixed_order(published: Published, store: ObjectStore) -> None:
    ds = shardline.open_dataset(published.cfg, store=store)
    parts = {}
    for split in ("train", "holdout"):
        with ds.torch_loader(batch_size=128, split=split) as loader:
            parts[split] = _keys(list(loader))
    assert not set(parts["train"]) & set(parts["holdout"])
    assert len(parts["train"]) + len(parts["holdout"]) == ds.rows
    assert 0.05 < len(parts["holdout"]) / ds.rows < 0.3      # [train] holdout_fraction 0.15
    with ds.torch_loader(batch_size=128, split="holdout", shuffle=False) as fixed:
        assert sorted(_keys(list(fixed))) == sorted(parts["holdout"])
    with ds.torch_loader(batch_size=100, shuffle=False) as fixed:
        ordered = _keys(list(fixed))
    assert sorted(ordered) == sorted(_keys(list(ds.torch_loader(batch_size=100))))
    with ds.torch_loader(batch_size=100, shuffle=False) as fixed:   # resume, fixed order
        it = iter(fixed)
        head = [next(it) for _ in range(3)]
        state = fixed.state_dict()
    with ds.torch_loader(batch_size=100, shuffle=False) as again:
        again.load_state_dict(state)
        assert _keys(head) + _keys(list(again)) == ordered
        assert _keys(list(again)) == ordered                         # a new pass starts over


def test_torch_iterable_dataset_with_a_dataloader(published: Published,
                                                  store: ObjectStore) -> None:
    ds = shardline.open_dataset(published.cfg, 1, store=store)
    loader = torch.utils.data.DataLoader(ds.torch_dataset(batch_size=100), batch_size=None)
    seen = [int(k) for b in loader for k in b["key"]]
    assert len(seen) == len(set(seen)) == len(SPLITS[0])


def test_no_bucket_anywhere_says_what_to_set(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.delenv("SHARDLINE_BUCKET", raising=False)
    monkeypatch.setenv("SHARDLINE_HOME", str(tmp_path / "no-stack"))
    with pytest.raises(ConfigError, match="SHARDLINE_BUCKET.*bucket="):
        shardline.open_dataset("digits")
