"""``shardline example NAME``: each typed example's upload written into a local folder (the
README's first step), read back with pyarrow / zarr / Pillow; its mistakes as one line; and
``shardline config check`` accepting every examples/*.toml. No service is involved."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from shardline.cli.main import app
from shardline.infra import example_data as ex

ROOT = Path(__file__).resolve().parents[2]


def shardline(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def write(name: str, out: Path, *rows: str) -> dict:
    code, stdout, stderr = shardline("example", name, "--out", str(out), *rows, "--json")
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["next"][0] == f"shardline upload {out} -c {doc['config']}"
    assert doc["next"][1:] == [f"shardline {c} -c {doc['config']}"
                               for c in ("ingest", "train", "models")]
    assert Path(doc["config"]).name == f"{name}.toml" and Path(doc["config"]).is_file()
    return doc


def test_diabetes_is_the_whole_table_as_parquet(tmp_path: Path) -> None:
    doc = write("diabetes", tmp_path / "d")
    path = Path(doc["path"])
    assert path == tmp_path / "d" / "diabetes.parquet" and doc["rows"] == 442
    assert doc["bytes"] == path.stat().st_size
    assert pq.read_table(path).equals(ex.diabetes_table())
    part = write("diabetes", tmp_path / "p", "--rows", "25")
    assert pq.read_table(part["path"]).equals(ex.diabetes_table().slice(0, 25))


def test_tags_are_pngs_with_a_subset_of_the_classes(tmp_path: Path) -> None:
    doc = write("tags", tmp_path, "--rows", "30")
    rows = [json.loads(x) for x in Path(doc["path"]).read_text().splitlines()]
    assert len(rows) == doc["rows"] == 30 and len({r["id"] for r in rows}) == 30
    assert {t for r in rows for t in r["tags"]} <= set(ex.TAGS)
    assert any(len(r["tags"]) > 1 for r in rows) and any(not r["tags"] for r in rows)
    for r in rows:
        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(r["image"]))))
        assert img.shape == (16, 16, 3) and img.dtype == np.uint8
        # a tagged channel holds the bright square, an untagged one only noise
        centre = img[4:12, 4:12].min(axis=(0, 1))
        assert [ex.TAGS[c] for c in range(3) if centre[c] >= 200] == r["tags"], r["id"]


def test_sentinel_is_a_zarr_group_that_a_rewrite_replaces(tmp_path: Path) -> None:
    import zarr

    write("sentinel", tmp_path, "--rows", "130")
    doc = write("sentinel", tmp_path, "--rows", "70")     # again, smaller: no stale chunk
    group = zarr.open_group(doc["path"], mode="r")
    arrays = {k: v[...] for k, v in group.arrays()}
    assert sorted(arrays) == ["bands", "ids", "label"]
    assert arrays["bands"].shape == (70, 13, 32, 32) and arrays["bands"].dtype == np.float32
    assert arrays["label"].dtype == np.int16 and set(arrays["label"]) <= {0, 1, 2, 3}
    assert len(set(arrays["ids"].tolist())) == 70
    ids, bands, labels = ex.sentinel_arrays(70)
    assert arrays["bands"].tobytes() == bands.tobytes()
    assert (arrays["label"] == labels).all()
    chunks = sorted(p.name for p in (Path(doc["path"]) / "bands" / "c").iterdir())
    assert chunks == ["0", "1"]   # 64 rows a chunk
    assert doc["bytes"] == sum(f.stat().st_size for f in Path(doc["path"]).rglob("*")
                               if f.is_file())


@pytest.mark.parametrize(("args", "message"), [
    (("example", "cats"), "unknown example 'cats': choose one of sentinel, diabetes, tags"),
    (("example", "diabetes", "--rows", "500"),
     "--rows 500: the diabetes example takes 1..442 (the data has 442 rows)"),
    (("example", "tags", "--rows", "0"), "--rows 0: the tags example takes at least 1"),
])
def test_mistakes_are_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, _, stderr = shardline(*args, "--out", str(tmp_path / "out"))
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert message in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    code, _, stderr = shardline("example", "tags", "--out", str(tmp_path / "f"))
    assert code == 1 and f"{tmp_path / 'f'} is a file: give --out a folder" in stderr
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.parametrize("toml", sorted(p.name for p in (ROOT / "examples").glob("*.toml")))
def test_config_check_accepts_every_example(toml: str) -> None:
    code, stdout, stderr = shardline("config", "check", "-c", str(ROOT / "examples" / toml))
    assert code == 0, stderr
    name = toml.removesuffix(".toml")
    assert ": valid (dataset " + name + "," in stdout, stdout
    kind = {"diabetes": "regression", "tags": "multilabel", "sentinel": "class"}.get(name)
    assert kind is None or f"({kind}," in stdout, stdout
