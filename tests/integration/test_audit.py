"""``shardline audit`` through a data subject's deletion on moto. Masked (``delete --mask``):
the id is served, then masked, then (compaction, a model retrained, expire, vacuum) in no
version and no shard, only in its batch's id file; the models trained on versions that held
it are named. Erased (``delete``'s default): after expire + vacuum every object in the
bucket is scanned for the id's bytes and none holds them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from typer.testing import CliRunner

import shardline
from shardline.api.label_diff import compaction_between
from shardline.bench.digits_data import digits
from shardline.cli.main import app
from shardline.core.config import StoreSettings
from shardline.core.manifest import latest_manifest, read_manifest
from shardline.core.replace import is_erasure
from shardline.core.store import ObjectStore
from shardline.tasks.audit import audit
from shardline.tasks.compact import compact
from shardline.tasks.delete import delete_ids
from shardline.tasks.erase import erase_ids
from shardline.tasks.expire import expire
from shardline.tasks.lease import store_now
from shardline.tasks.vacuum import vacuum
from shardline.tasks.verify import verify
from shardline.trainer.registry_view import model_rows
from shardline.trainer.retention import versions_in_use
from tests.integration.cli_helpers import cli_env
from tests.integration.compact_data import publish_small, rows_of
from tests.integration.retention_data import live_model
from tests.integration.trainer_data import config_toml, digits_config

CFG = digits_config()
DS, MODEL = CFG.dataset, CFG.train.registry_name


def _models(store: ObjectStore) -> list[dict]:
    return [{"registry": MODEL, **r} for r in model_rows(store, DS.name, MODEL)]


def _holders(store: ObjectStore, needle: bytes) -> set[str]:
    """Every object in the bucket whose bytes contain ``needle``."""
    return {o.key for o in store.list("") if needle in store.get_bytes(o.key)}


def _delete_expire_vacuum(store: ObjectStore, x: str) -> dict:
    """Publish, train on v2, delete ``x``, compact, retrain, expire, vacuum; the audits."""
    publish_small(store, DS, batches=3)
    live_model(store, DS.name, MODEL, 2)
    seen = {"start": audit(store, DS, x, _models(store))}
    delete_ids(store, DS, [x])
    seen["deleted"] = audit(store, DS, x, _models(store))
    v5 = compact(store, DS, target_mb=1.0)                     # drops the masked row
    live_model(store, DS.name, MODEL, v5.version)              # retrained after the delete
    expire(store, DS, keep=1, held=versions_in_use(store, DS.name))
    seen["expired"] = audit(store, DS, x, _models(store))
    later = store_now(store, DS.prefix) + timedelta(minutes=DS.sweep_after_minutes + 1)
    vacuum(store, DS, now=later)
    seen["vacuumed"] = audit(store, DS, x, _models(store))
    return seen


def test_audit_follows_a_deleted_id(store: ObjectStore, store_settings: StoreSettings,
                                    tmp_path: Path) -> None:
    x = digits()[0][10]                                         # in the first batch
    seen = _delete_expire_vacuum(store, x)
    start = seen["start"]
    assert [(v["version"], v["state"]) for v in start.versions] == \
        [(1, "served"), (2, "served"), (3, "served")]
    shard = next(f for f in start.files if f["kind"] == "shard")
    assert shard["referenced_by"] == [1, 2, 3] and shard["after_vacuum"] == "kept"
    assert {f["kind"] for f in start.files} == {"shard", "id file"}
    assert [(m["model"], m["dataset_version"]) for m in start.models] == [(1, 2)]

    assert seen["deleted"].versions[-1] == {"version": 4, "state": "masked", "rows": 0}
    assert [m["model"] for m in seen["deleted"].models] == [1]

    expired = seen["expired"]
    assert [v["state"] for v in expired.versions] == [
        "served (expired, files kept until vacuum)"] * 3 + [
        "masked (expired, files kept until vacuum)", "absent"]
    old = next(f for f in expired.files if f["key"] == shard["key"])
    assert old["after_vacuum"] == "removed by vacuum"
    assert [m["model"] for m in expired.models] == [1]          # not model 2 (trained on v5)

    after = seen["vacuumed"]
    assert [(v["version"], v["state"]) for v in after.versions] == \
        [(1, "expired"), (2, "expired"), (3, "expired"), (4, "expired"), (5, "absent")]
    assert after.files == []          # compaction left it out of the batch's new id file
    # nothing in the bucket names the id any more, so no model can be inferred for the
    # expired versions (the audits before vacuum named model 1)
    assert after.models == []
    # no shard, id file, batch list, checkpoint, vector or document holds it any more
    assert _holders(store, x.encode()) == set()

    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(CFG))
    out = CliRunner().invoke(app, ["audit", "-c", str(path), "--id", x],
                             env=cli_env(store_settings, tmp_path))
    assert out.exit_code == 0, out.output
    assert f"id '{x}': expired in v1, v2, v3, v4; absent in v5" in out.output
    assert "model 1 of" not in out.output


def test_no_object_holds_a_deleted_id_after_expire_and_vacuum(store: ObjectStore) -> None:
    x = digits()[0][10]
    _delete_expire_vacuum(store, x)
    assert _holders(store, x.encode()) == set()


def test_no_object_holds_a_deleted_id_after_erase_expire_and_vacuum(store: ObjectStore
                                                                   ) -> None:
    """The data subject's path (``shardline delete``'s default, no compaction): erase,
    expire --keep 1, vacuum after the window: no object in the bucket holds the id, and
    audit says so; every other row is still served."""
    ids, labels, _ = digits()
    x, y = ids[10], min(ids[250:500])      # batch 1; batch 2's smallest (its id range)
    z = next(ids[i] for i in range(11, 250) if labels[i] == labels[10])   # x's shard
    w = next(ids[i] for i in range(11, 250) if labels[i] != labels[10])   # another shard
    publish_small(store, DS, batches=3)
    before = rows_of(store, latest_manifest(store, DS.prefix))
    delete_ids(store, DS, [z, w])                              # masked rows: v4
    r = erase_ids(store, DS, [x, y])
    assert (r.version, r.rows_deleted, r.id_files_rewritten) == (5, 2, 2)
    m = latest_manifest(store, DS.prefix)
    # z's masked row went with x's shard; w's shard is untouched and keeps its vector
    assert m.rows == before.num_rows - 4 and m.deleted_rows == 1
    assert m.doc.changes is not None and m.doc.changes.deleted == 2
    assert is_erasure(m) and not is_erasure(read_manifest(store, DS.prefix, 4))
    assert verify(store, DS).sound
    # `shardline diff` across it cannot list the erased ids (none is kept): says incomplete
    assert compaction_between(lambda v: read_manifest(store, DS.prefix, v), 4, 5)

    def without(gone: list[str]) -> pa.Table:
        return before.filter(pc.invert(pc.is_in(before.column("id"), value_set=pa.array(gone))))

    kept = without([x, y, z])                                  # the shards' rows (w masked)
    assert rows_of(store, m).equals(kept)
    served = shardline.open_dataset(DS, store=store).to_table().column("id").to_pylist()
    assert sorted(served) == sorted(without([x, y, z, w]).column("id").to_pylist())
    expire(store, DS, keep=1, held=versions_in_use(store, DS.name))
    later = store_now(store, DS.prefix) + timedelta(minutes=DS.sweep_after_minutes + 1)
    vacuum(store, DS, now=later)
    assert _holders(store, x.encode()) == set() and _holders(store, y.encode()) == set()
    after = audit(store, DS, x, _models(store))
    assert after.files == [] and after.versions[-1]["state"] == "absent"
    assert rows_of(store, latest_manifest(store, DS.prefix)).equals(kept)
