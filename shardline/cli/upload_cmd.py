"""``shardline upload PATH... -c F``: put local files (or folders) under the dataset's
incoming prefix, as the next ingest (or the upload trigger) expects them.

A file lands at ``<incoming><name>``; a folder's files keep their paths relative to the
folder, as ``aws s3 cp --recursive`` does (``photos/3/a.png`` -> ``<incoming>3/a.png``), so an
ImageFolder tree stays one.
Hidden files (``.DS_Store``, ``.git/``) are skipped. Progress: a bar on a terminal, one line
per file in a pipe.
"""

from __future__ import annotations

from pathlib import Path

import typer

from shardline.cli.common import ConfigOpt, JsonOpt, prepare
from shardline.cli.output import emit_json, err, fail, is_tty, line
from shardline.core.errors import ConfigError, ShardlineError


def plan_uploads(paths: list[Path], incoming: str) -> list[tuple[Path, str]]:
    """(local file, object key) for every file under ``paths``, in a stable order; raises
    :class:`ConfigError` naming a path that does not exist or holds no file."""
    out: list[tuple[Path, str]] = []
    for p in paths:
        if not p.exists():
            raise ConfigError(f"{p}: no such file or folder; give files or folders to upload")
        if p.is_file():
            out.append((p, incoming + p.name))
            continue
        files = sorted(f for f in p.rglob("*") if f.is_file() and not any(
            part.startswith(".") for part in f.relative_to(p).parts))
        if not files:
            raise ConfigError(f"{p}: the folder holds no files to upload")
        out += [(f, incoming + f.relative_to(p).as_posix()) for f in files]
    return out


def upload(paths: list[Path] = typer.Argument(..., help="files or folders to upload"),
           config: str = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """Upload files or folders into the dataset's incoming prefix (keys keep relative paths)."""
    prepare()
    from shardline.cli import preflight
    from shardline.core.config import StoreSettings
    from shardline.core.store import ObjectStore

    try:
        cfg = preflight.config(config)
        todo = plan_uploads(paths, cfg.dataset.incoming)
        store = ObjectStore(StoreSettings.from_env())
        preflight.s3(store.settings)
        total = sum(f.stat().st_size for f, _ in todo)
        _send(store, todo, total, quiet=as_json)
    except ShardlineError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"dataset": cfg.dataset.name, "objects": len(todo), "bytes": total,
                   "keys": [k for _, k in todo]})
        return
    line(f"uploaded {len(todo)} file(s), {total} bytes, to "
         f"s3://{store.bucket}/{cfg.dataset.incoming}")


def _send(store: object, todo: list[tuple[Path, str]], total: int, quiet: bool) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    put = store.upload_file   # type: ignore[attr-defined]
    if quiet or not is_tty():
        for f, key in todo:
            put(key, str(f))
            if not quiet:
                line(f"{f} -> {key}")
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("uploading", total=total)
        for f, key in todo:
            bar.update(task, description=key[-60:])
            put(key, str(f))
            bar.advance(task, f.stat().st_size)


def register(app: typer.Typer) -> None:
    app.command("upload")(upload)
