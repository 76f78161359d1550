"""The readers of deletion uploads (``tasks.deletion_uploads.read_ids``): each format gives
(line, id) pairs in file order; an empty or unreadable file is one line naming the key."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardline.tasks.deletion_uploads import DeletionFileError, read_ids

KEY = "incoming/ds/deletions/f"


def test_text_csv_json_parquet() -> None:
    assert read_ids(b"a\n\n b \nc", f"{KEY}.txt", "id") == [(1, "a"), (3, "b"), (4, "c")]
    assert read_ids(b"why,uid\nx,a\ny,b\n", f"{KEY}.csv", "uid") == [(2, "a"), (3, "b")]
    assert read_ids(b'{"id": "a"}\n\n{"id": 7}\n', f"{KEY}.jsonl", "id") == \
        [(1, "a"), (3, "7")]
    assert read_ids(b'["a", {"id": "b"}]', f"{KEY}.json", "id") == [(1, "a"), (2, "b")]
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": ["a", None, "c"]}), sink)
    assert read_ids(sink.getvalue(), f"{KEY}.parquet", "id") == [(1, "a"), (3, "c")]


@pytest.mark.parametrize(("data", "name", "why"), [
    (b"\n \n", f"{KEY}.txt", "no id in it"),
    (b"\xff\xfe\x00", f"{KEY}.txt", "cannot read it"),
    (b"other\nx\n", f"{KEY}.csv", "no 'id' column"),
    (b"{not json", f"{KEY}.json", "cannot read it"),
    (b"PAR1 not parquet", f"{KEY}.parquet", "cannot read it"),
])
def test_bad_files_are_one_line_naming_the_key(data: bytes, name: str, why: str) -> None:
    with pytest.raises(DeletionFileError) as err:
        read_ids(data, name, "id")
    msg = str(err.value)
    assert msg.startswith(f"deletion upload {name}: ") and why in msg and "\n" not in msg
