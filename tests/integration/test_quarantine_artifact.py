"""The quarantine artifact of a hostile drop, read back through the Prefect API: every
refused row with key, row, rule and value excerpt, a thumbnail for the image rows that can
be previewed, a mark for the rest (decompression bomb, not an image, cut-off PNG).

Real parts: the ingest flow on a Prefect server (test harness), moto S3, Spark Connect."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

from PIL import Image

from shardline.flows import quarantine_view as qv
from shardline.infra.demo_data import digits, jsonl_bytes
from tests.integration.cli_helpers import write_config
from tests.integration.test_ingest_flow import artifacts
from tests.unit.test_containment import png_bomb
from tests.unit.test_quarantine_view import png

THUMB = re.compile(r"^!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)$")


def cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def refused_rows(markdown: str) -> list[list[str]]:
    part = markdown.split("## Refused rows", 1)[1]
    lines = [ln for ln in part.splitlines() if ln.startswith("| ")]
    assert cells(lines[0]) == ["preview", "key", "row", "rule", "value"]
    return [cells(ln) for ln in lines[1:]]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_hostile_drop_shows_thumbnails_and_marks(prefect_harness, stack_env, store,
                                                    spark_remote, monkeypatch,
                                                    tmp_path: Path) -> None:
    from shardline.flows.ingest import ingest

    monkeypatch.setenv("SHARDLINE_SPARK_REMOTE", spark_remote)
    cfg = write_config(tmp_path, "thumbs", 0.5)   # a fifth of the rows is refused: publish
    good = digits(0, 60)
    img8 = b64(png(8, 8))

    def row(rid: str, label: object, image: object) -> str:
        return json.dumps({"id": rid, "label": label, "image": image})

    special = [
        row("wrong-shape", 1, b64(png(16, 16))),              # wrong_shape -> thumbnail
        row("bad-label", "seven", img8),                      # unknown_label -> thumbnail
        row("bomb", 1, b64(png_bomb(100_000, 100_000))),      # image_too_large -> mark
        row("text", 1, b64(b"just some text, no picture")),   # undecodable -> mark
        row("cut", 1, b64(png(8, 8)[:50])),                   # cut-off PNG -> mark
        row("no-image", 1, None),                             # missing_image -> mark
    ]
    extra = [row(f"extra-{i}", "nine", img8) for i in range(qv.MAX_THUMBS - 3)]
    store.put_bytes("incoming/thumbs/a.jsonl", jsonl_bytes(good) +
                    ("\n".join(special + extra) + "\n").encode())
    store.put_bytes("incoming/thumbs/imgs/3/big.png", png(20, 20))   # an image file
    result = ingest(config=str(cfg))
    assert result["version"] == 1 and result["rows_published"] == 60
    assert result["rows_quarantined"] == len(special) + len(extra) + 1

    art = artifacts(["thumbs-quarantine"])["thumbs-quarantine"]
    assert art.type == "markdown"
    assert "# Quarantine of `thumbs` batch" in art.data
    rows = refused_rows(art.data)
    assert len(rows) == result["rows_quarantined"]
    by_id: dict[str, list[str]] = {}
    for preview, key, srow, rule, value in rows:
        m = re.search(r'"id": "([^"]+)"', value.replace("\\", ""))
        name = m.group(1) if m else key.replace("\\", "")
        by_id[name] = [preview, key, srow, rule, value]
        assert key.replace("\\", "").startswith("incoming/thumbs/") and srow.isdigit()
        assert rule.replace("\\", "") in ("wrong_shape", "unknown_label", "image_too_large",
                                          "undecodable_image", "missing_image"), rule

    def thumb(name: str) -> tuple[int, int]:
        m = THUMB.match(by_id[name][0])
        assert m, (name, by_id[name][0][:120])
        with Image.open(io.BytesIO(base64.b64decode(m.group(2)))) as img:
            assert img.format == "PNG"
            return img.size

    assert thumb("wrong-shape") == (48, 48)   # 16 px scaled up 3x
    assert thumb("bad-label") == (48, 48)
    assert thumb("incoming/thumbs/imgs/3/big.png") == (40, 40)
    assert all(thumb(f"extra-{i}") == (48, 48) for i in range(len(extra)))
    assert by_id["bad-label"][3] == "unknown\\_label" and "seven" in by_id["bad-label"][4]
    marks = {"bomb": "*not previewed", "text": "*not an image (no PNG/JPEG signature)*",
             "cut": "*unreadable image", "no-image": "*no image: 'image' is missing*"}
    for name, want in marks.items():
        assert by_id[name][0].replace("\\", "").startswith(want), (name, by_id[name][0])
        assert "data:image" not in by_id[name][0]
    n_thumbs = sum(bool(THUMB.match(r[0])) for r in rows)
    assert n_thumbs == qv.MAX_THUMBS
