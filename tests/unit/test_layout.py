"""Object keys: one home (``shardline.core.layout``), every key under the dataset prefix,
and the keys racing publishers could both write carry the run id."""

from __future__ import annotations

from shardline.core import layout, schema

P = "lake/ds"


def test_version_keys_round_trip() -> None:
    for v in (1, 42, 999_999):
        key = layout.version_key(P, v)
        assert key.startswith(layout.versions_prefix(P)) and layout.version_of_key(key) == v
    assert layout.version_of_key(f"{P}/versions/v000001.json.tmp") is None
    assert layout.version_of_key(layout.checkpoint_key(P, 1, "r")) is None


def test_every_key_lives_under_the_dataset_prefix_in_its_folder() -> None:
    keys = {
        "manifests/": [layout.batch_list_key(P, "b", "r"), layout.checkpoint_key(P, 10, "r"),
                       layout.schema_key(P, "abc"), layout.config_key(P, "def")],
        "shards/": [layout.shard_key(P, "b", 3, 0, "r"), layout.shard_key(P, "b", None, 7, "r")],
        "quarantine/": [layout.quarantine_key(P, "b", 0, "r")],
        "ids/": [layout.ids_key(P, "b", "r")],
        "deletes/": [layout.deletion_vector_key(P, "b", "0" * 64, "r", 3),
                     layout.deletions_index_key(P, 3, "r")],
        "batches/": [layout.batch_claim_key(P, "b")],
        "staging/": [layout.staged_data_key(P, "r", 2, 1, 0, 3),
                     layout.staged_quarantine_key(P, "r", 1, 0),
                     layout.staged_duplicates_key(P, "r")],
        "reports/": [layout.report_key(P, "r")],
    }
    for folder, ks in keys.items():
        assert all(k.startswith(f"{P}/{folder}") for k in ks), (folder, ks)
    assert layout.staged_data_key(P, "r", 2, 1, 0, 3).startswith(layout.staging_prefix(P, "r"))
    assert set(layout.SWEPT_FOLDERS) <= set(keys)
    staged = layout.staged_data_key(P, "r", None, 1, 0, 0)
    assert layout.staged_rewrite_key(staged).startswith(staged.removesuffix(".arrow"))
    assert layout.staged_rewrite_key(staged) != staged


def test_keys_a_racing_publisher_could_write_carry_the_run_id() -> None:
    for build in (lambda r: layout.batch_list_key(P, "b", r),
                  lambda r: layout.checkpoint_key(P, 10, r),
                  lambda r: layout.shard_key(P, "b", 1, 0, r),
                  lambda r: layout.quarantine_key(P, "b", 0, r),
                  lambda r: layout.ids_key(P, "b", r)):
        assert build("run-a") != build("run-b")


def test_shard_names_are_hive_partitioned_and_zero_padded() -> None:
    assert layout.shard_key(P, "b1", 3, 12, "r") == \
        f"{P}/shards/batch=b1/label=3/part-00012-r.arrow"
    assert layout.shard_key(P, "b1", None, 0, "r") == f"{P}/shards/batch=b1/part-00000-r.arrow"
    assert layout.staged_data_key(P, "r", None, 4, 2, 1) == \
        f"{P}/staging/r/data/t00004-0002-a1.arrow"


def test_schema_module_reexports_the_same_builders() -> None:
    for name in ("version_key", "versions_prefix", "shard_key", "quarantine_key", "ids_key",
                 "batch_claim_key", "staging_prefix", "report_key"):
        assert getattr(schema, name) is getattr(layout, name)
