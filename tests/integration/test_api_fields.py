"""The notebook API on a dataset of typed fields against a real S3 server (moto): the
fields it declares, tables with tensor columns, pandas cells as N-d arrays, and the torch
loader's dicts, every value the one its row holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import shardline
from shardline.core.builder import commit_version
from shardline.core.store import ObjectStore
from tests.unit.trainer.typed_data import draft_version, typed_config, value

ROWS = 120


@pytest.fixture
def typed(store: ObjectStore, tmp_path: Path) -> shardline.Dataset:
    cfg = typed_config()
    draft = draft_version(store.put_bytes, cfg, np.arange(ROWS), None, "lz4")
    commit_version(store, draft)
    return shardline.open_dataset(cfg.name, store=store, root=cfg.root)


def test_fields_tables_and_pandas_hold_the_arrays(typed: shardline.Dataset) -> None:
    info = typed.fields
    assert {f.name for f in info.fields} == {"bands", "rgb16", "valid", "elevation", "cloudy",
                                             "landuse", "note"}
    assert info.field("bands").shape == (13, 32, 32) and info.field("rgb16").shape == (3, 6, 5)
    assert info.target.kind == "multilabel" and info.target.name == "tags"
    table = typed.to_table()
    rows = table.column("source_row").to_numpy()
    assert sorted(rows.tolist()) == list(range(ROWS))
    bands = typed.array(table, "bands")
    assert bands.shape == (ROWS, 13, 32, 32) and bands.dtype == np.float32
    assert np.array_equal(bands, value(info, "bands", rows))
    assert np.array_equal(typed.images(table), value(info, "rgb16", rows))   # H, W, C
    df = typed.to_pandas()
    assert list(df.columns) == table.column_names
    cell = df["bands"].iloc[5]
    assert isinstance(cell, np.ndarray) and cell.shape == (13, 32, 32)
    assert np.array_equal(cell, value(info, "bands", rows[5:6])[0])
    assert df["rgb16"].iloc[0].shape == (6, 5, 3) and df["rgb16"].iloc[0].dtype == np.uint16
    assert np.array_equal(np.stack(df["tags"]), value(info, "tags", rows))
    assert df["elevation"].dtype == np.float32


def test_torch_loader_yields_one_tensor_per_field(typed: shardline.Dataset,
                                                  tmp_path: Path) -> None:
    info = typed.fields
    # key = (position in the manifest's shard list << 32) | row in that shard
    source = [typed.to_dataset(shards=[s]).to_table().column("source_row").to_numpy()
              for s in typed.manifest.shards]
    seen: list[int] = []
    with typed.torch_loader(batch_size=32, cache_dir=str(tmp_path / "cache")) as loader:
        for batch in loader:
            keys = batch["key"].tolist()
            seen += keys
            rows = np.array([source[k >> 32][k & 0xFFFFFFFF] for k in keys])
            assert batch["rgb16"].shape[1:] == (3, 6, 5)        # served C, H, W
            assert batch["rgb16"].dtype == torch.uint16
            assert np.array_equal(batch["rgb16"].permute(0, 2, 3, 1).numpy(),
                                  value(info, "rgb16", rows))
            for name in ("bands", "valid", "elevation", "cloudy", "landuse", "tags"):
                assert np.array_equal(batch[name].numpy(), value(info, name, rows)), name
            assert "note" not in batch                       # free text is no tensor
    assert len(seen) == len(set(seen)) == ROWS
