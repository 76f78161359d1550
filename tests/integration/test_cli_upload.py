"""``shardline upload`` as a user runs it (a subprocess, stdout a pipe) against moto S3:
files and a folder land under the dataset's incoming prefix with their relative paths and
their bytes; a missing path is one line, exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.cli_helpers import cli_env, run_cli

CONFIG = """
[dataset]
name = "up"
incoming = "incoming/up/"
classes = ["0", "1"]
"""


def test_upload_puts_files_and_folders_under_incoming(
        store: ObjectStore, store_settings: StoreSettings, tmp_path: Path) -> None:
    cfg = tmp_path / "up.toml"
    cfg.write_text(CONFIG)
    drop = tmp_path / "drop"
    (drop / "1").mkdir(parents=True)
    files = {"1/a.png": b"\x89PNG" + bytes(range(256)) * 40, "b.jsonl": b'{"id": 1}\n'}
    for rel, data in files.items():
        (drop / rel).write_bytes(data)
    single = tmp_path / "c.csv"
    single.write_bytes(b"id,label\n")
    env = cli_env(store_settings, tmp_path)
    r = run_cli(env, "upload", str(drop), str(single), "-c", str(cfg))
    assert r.returncode == 0, r.stderr
    assert f"{drop / 'b.jsonl'} -> incoming/up/b.jsonl" in r.stdout.splitlines()
    assert "uploaded 3 file(s)" in r.stdout
    stored = {o.key: store.get_bytes(o.key) for o in store.list("incoming/up/")}
    assert stored == {"incoming/up/1/a.png": files["1/a.png"],
                      "incoming/up/b.jsonl": files["b.jsonl"],
                      "incoming/up/c.csv": b"id,label\n"}

    again = run_cli(env, "upload", str(single), "-c", str(cfg), "--json")
    assert json.loads(again.stdout)["keys"] == ["incoming/up/c.csv"]

    missing = run_cli(env, "upload", str(tmp_path / "nope"), "-c", str(cfg))
    lines = [x for x in missing.stderr.splitlines() if x.strip()]
    assert missing.returncode == 1 and len(lines) == 1 and "no such file or folder" in lines[0]
