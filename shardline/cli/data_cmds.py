"""``shardline quarantine``, ``diff``: read-only views of the versions (``shardline models``
is ``cli/models_cmd.py``).

Both read the bucket only (manifests, quarantine shards) and never start a flow run.
"""

from __future__ import annotations

from typing import Any

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, fail, line, rows
from shardline.core.errors import ShardlineError

LimitOpt = typer.Option(50, "--limit", min=0, help="rows to print (0 = all)")
AllOpt = typer.Option(False, "--all", help="every live batch's rejects, not only the "
                      "version's own batch")


def _open(config: str, version: int | None) -> Any:
    from shardline.api.dataset import open_dataset
    from shardline.cli import preflight

    cfg, store = preflight.config_and_store(config, versions=True, version=version)
    return cfg, open_dataset(cfg, version, store=store)


def quarantine(config: str = ConfigOpt,
               version: int = typer.Option(None, "--version", help="dataset version "
                                           "(default: latest)"),
               all_batches: bool = AllOpt, limit: int = LimitOpt, as_json: bool = JsonOpt
               ) -> None:
    """Rows a version rejected: object key, row, rule broken, message, and an excerpt.

    Without --version, when the newest ingest's batch failed validation (nothing published
    after it), its refused rows (from its validation report).
    """
    prepare()
    try:
        if version is None and not all_batches and _show_failed(config, limit, as_json):
            return
        _, ds = _open(config, version)
        table = ds.quarantine(all_batches=all_batches)
    except ShardlineError as exc:
        fail(exc, as_json)
    records = [{"key": r["source_key"], "row": r["source_row"], "id": r["id"],
                "rule": r["rule"], "message": r["message"], "excerpt": _excerpt(r["raw"])}
               for r in table.to_pylist()]
    if as_json:
        emit_json({"dataset": ds.name, "version": ds.version, "rows": records})
        return
    shown = records if limit == 0 else records[:limit]
    rows(shown, title=f"{ds.name} v{ds.version}: {len(records)} quarantined row(s)",
         empty=f"{ds.name} v{ds.version} quarantined nothing")
    if len(shown) < len(records):
        line(f"... {len(records) - len(shown)} more (--limit 0 shows all, --json for data)")


def _show_failed(config: str, limit: int, as_json: bool) -> bool:
    """Print the refused rows of the newest failed batch, if the newest ingest failed."""
    from shardline.cli import preflight
    from shardline.tasks.mistakes import latest_failed_report

    cfg, store = preflight.config_and_store(config)
    doc = latest_failed_report(store, cfg.dataset.prefix)
    if doc is None:
        return False
    records = [{"key": r["source_key"], "row": r["source_row"], "id": r["id"],
                "rule": r["rule"], "message": r["message"], "excerpt": r.get("excerpt", "")}
               for r in doc.get("refused_rows", [])]
    if as_json:
        emit_json({"dataset": cfg.dataset.name, "version": None, "failed_batch": doc["batch"],
                   "report": doc["uri"], "rows": records})
        return True
    total = int(doc.get("counts", {}).get("quarantined", len(records)))
    shown = records if limit == 0 else records[:limit]
    rows(shown, title=f"{cfg.dataset.name}: batch {doc['batch']} failed validation, nothing "
         f"published; {total} refused row(s) (report {doc['uri']})",
         empty=f"batch {doc['batch']} failed validation; its report lists no rows")
    if len(shown) < total:
        line(f"... {total - len(shown)} more (the report {doc['uri']} keeps the first "
             f"{len(records)}; --limit 0 shows those)")
    return True


def _excerpt(raw: bytes | None, width: int = 60) -> str:
    if not raw:
        return ""
    text = raw[:width * 4].decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def diff(config: str = ConfigOpt,
         from_version: int = typer.Argument(None, help="older version (or --from)"),
         to_version: int = typer.Argument(None, help="newer version (default: latest)"),
         from_opt: int = typer.Option(None, "--from", help="older version (default: the "
                                      "one before --to)"),
         to_opt: int = typer.Option(None, "--to", help="newer version (default: latest)"),
         limit: int = LimitOpt, as_json: bool = JsonOpt) -> None:
    """What changed between two versions: batches and shards added or removed, rows, and
    the ids corrected (old and new label) or deleted."""
    prepare()
    try:
        _, new = _open(config, to_opt if to_opt is not None else to_version)
        older = from_opt if from_opt is not None else from_version
        if older is None:
            older = max(new.version - 1, 1)
        _, old = _open(config, older)
        result = old.diff(new)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.to_dict())
        return
    line(f"{result.dataset} v{result.from_version} -> v{result.to_version}: "
         f"+{result.rows_added} rows in {len(result.added)} shard(s) "
         f"({len(result.added_batches)} batch(es)), -{result.rows_removed} rows in "
         f"{len(result.removed)} shard(s) ({len(result.removed_batches)} batch(es)); "
         f"{len(result.labels.changed)} id(s) corrected, {len(result.labels.deleted)} deleted")
    changes = [{"id": c["id"], "change": "corrected", "old": c["old"], "new": c["new"]}
               for c in result.labels.changed]
    changes += [{"id": d["id"], "change": "deleted", "old": d["old"], "new": ""}
                for d in result.labels.deleted]
    if changes:
        shown = changes if limit == 0 else changes[:limit]
        rows(shown, title="ids changed", columns=["id", "change", "old", "new"])
        if len(shown) < len(changes):
            line(f"... {len(changes) - len(shown)} more (--limit 0 shows all, --json for data)")
    if not result.labels.complete:
        line("a compaction or an erasure in between rewrote shards: changes before it are not "
             "listed (erased ids are never listed)")


def register(app: typer.Typer) -> None:
    app.command("quarantine")(quarantine)
    app.command("diff")(diff)
