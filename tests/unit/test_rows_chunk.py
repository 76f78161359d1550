"""``SHARDLINE_ROWS_CHUNK`` sets how many rows the ingest driver holds at once: read when a
batch is chunked (not at import), range-checked, and a bad value is a ConfigError naming
the variable."""

from __future__ import annotations

import pytest

from shardline.core.errors import ConfigError
from shardline.tasks.convert.rowfiles import CHUNK_ROWS, RowFile, chunk_rows, plan_chunks
from shardline.tasks.id_index import ID_BUCKETS


def _file(per_bucket: int) -> RowFile:
    return RowFile("k", per_bucket * ID_BUCKETS, {}, (per_bucket,) * ID_BUCKETS)


def test_default_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDLINE_ROWS_CHUNK", raising=False)
    assert chunk_rows() == CHUNK_ROWS
    files = [_file(1_000)]                                    # 1,000 passed rows per bucket
    assert plan_chunks(files) == [range(0, ID_BUCKETS)]       # 64k rows: one chunk
    monkeypatch.setenv("SHARDLINE_ROWS_CHUNK", "4000")
    chunks = plan_chunks(files)
    assert [len(r) for r in chunks] == [4] * (ID_BUCKETS // 4)  # 4 buckets = 4,000 rows each
    assert plan_chunks(files, 2_000) == [range(k, k + 2) for k in range(0, ID_BUCKETS, 2)]


@pytest.mark.parametrize("value", ["lots", "10", "0"])
def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SHARDLINE_ROWS_CHUNK", value)
    with pytest.raises(ConfigError, match="SHARDLINE_ROWS_CHUNK"):
        plan_chunks([_file(10)])
