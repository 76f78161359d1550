"""The scale bench's "correct 100 rows" step on moto: a correction and a deletion of 100
rows cost the same requests on a 12-version history as on a 1-version one (the same rows
are touched; the id ranges in the version's references skip every other batch's id file),
within the one checkpoint read a longer history adds."""

from __future__ import annotations

from shardline.bench.scale_corrections import measure
from shardline.core.store import ObjectStore


def test_correcting_100_rows_is_flat_against_history(store: ObjectStore) -> None:
    short, long = measure(store, (1, 12))
    for step in ("correct", "delete"):
        a, b = short[step], long[step]
        assert a["id_file_gets"] == b["id_file_gets"] == 1, (a, b)
        assert a["shard_gets"] == b["shard_gets"] == 10            # the touched batch's
        assert a["puts"] == b["puts"]
        assert b["requests"] - a["requests"] <= 1, (a["by_op"], b["by_op"])
