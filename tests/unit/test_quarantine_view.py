"""Thumbnails of refused rows (flows/quarantine_view.py): which rows get one, which get a
mark, and that hostile values are never decoded."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
from PIL import Image

from shardline.flows import quarantine_view as qv
from shardline.flows.artifacts import quarantine_markdown
from shardline.tasks.convert.limits import Limits
from tests.unit.test_containment import png_bomb


def png(w: int, h: int, mode: str = "L") -> bytes:
    arr = np.arange(w * h * (3 if mode == "RGB" else 1), dtype=np.uint8)
    img = Image.fromarray(arr.reshape(h, w, 3) if mode == "RGB" else arr.reshape(h, w), mode)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def thumb_size(p: qv.Preview) -> tuple[int, int]:
    assert p.png is not None, p.text
    with Image.open(io.BytesIO(p.png)) as img:
        assert img.format == "PNG"
        return img.size


def line(image: object, column: str = "image") -> bytes:
    return json.dumps({"id": "a", "label": 1, column: image}).encode()


def test_an_image_in_a_json_line_becomes_a_small_thumbnail() -> None:
    p = qv.preview({"raw": line(base64.b64encode(png(200, 100, "RGB")).decode())}, "image")
    assert thumb_size(p) == (qv.THUMB_PX, qv.THUMB_PX // 2) and p.text == "200 x 100 image"
    small = qv.preview({"raw": line(base64.b64encode(png(8, 8)).decode())}, "image")
    assert thumb_size(small) == (48, 48)   # scaled up 6x, nearest pixel: still 8 x 8 cells
    with Image.open(io.BytesIO(small.png or b"")) as img:
        cells = np.asarray(img)[::6, ::6]
        assert np.array_equal(cells, np.arange(64, dtype=np.uint8).reshape(8, 8))
    assert thumb_size(qv.thumbnail(png(20, 10))) == (40, 20)
    md = small.markdown()
    assert md.startswith("![8 x 8 image](data:image/png;base64,") and md.endswith(")")


def test_image_file_bytes_and_csv_fields_are_found() -> None:
    assert thumb_size(qv.preview({"raw": png(10, 10)}, "image")) == (40, 40)
    csv = b"id7,3," + base64.b64encode(png(9, 9))
    assert thumb_size(qv.preview({"raw": csv}, "image")) == (45, 45)


def test_values_that_are_not_images_get_a_mark() -> None:
    cases = {
        b"": "no value kept",
        line(None): "no image: 'image' is missing",
        line(123): "not an image: 'image' holds int",
        line("***"): "not an image: 'image' is not base64",
        line(base64.b64encode(b"hello world, not a picture").decode()):
            "not an image (no PNG/JPEG signature)",
        b'{"id": "x", "label": ': "not an image: the row is not valid JSON",
        b"a,b,c": "not an image",
    }
    for raw, want in cases.items():
        p = qv.preview({"raw": raw}, "image")
        assert p.png is None and p.text == want, (raw, p)
        assert p.markdown().startswith("*")


def test_bombs_and_broken_images_are_never_decoded() -> None:
    bomb = qv.preview({"raw": line(base64.b64encode(png_bomb(100_000, 100_000)).decode())},
                      "image")
    assert bomb.png is None and bomb.text.startswith("not previewed"), bomb
    # under the dataset's max_pixels but over the preview cap: still not decoded
    assert qv.thumbnail(png_bomb(4000, 4000)).png is None
    assert qv.thumbnail(png(20, 20), Limits(max_pixels=100)).png is None
    cut = png(30, 30)[:60]
    p = qv.thumbnail(cut)
    assert p.png is None and p.text.startswith("unreadable image"), p
    assert qv.thumbnail(b"GIF89a" + b"\0" * 40).text == "not an image (no PNG/JPEG signature)"
    huge = b"\x89PNG\r\n\x1a\n" + b"\0" * (qv.MAX_PREVIEW_BYTES + 1)
    assert qv.thumbnail(huge).text.startswith("not previewed")


def test_the_number_of_thumbnails_is_bounded() -> None:
    src = qv.QuarantineSource(store=None, shards=())   # type: ignore[arg-type]
    rows = [{"source_key": "a.jsonl", "source_row": i,
             "raw": line(base64.b64encode(png(8, 8)).decode())} for i in range(20)]
    got = qv.previews(src, rows, max_thumbs=5)
    assert sum(p.png is not None for _, p in got) == 5
    assert all(p.text.startswith("not previewed: 5 thumbnails") for _, p in got[5:])


def test_markdown_escapes_hostile_text() -> None:
    row = {"source_key": "in/a|b`<img src=x onerror=alert(1)>.jsonl", "source_row": 3,
           "rule": "unknown_label", "raw": b"| evil ![x](javascript:alert(1)) \n next"}
    text = qv.rows_markdown([(row, qv.Preview("not an image"))], total=1)
    body = text.splitlines()[-1]
    assert body.count(" | ") == 4   # five cells: no pipe of the value split a cell
    assert all(body[i - 1] == "\\" for i, c in enumerate(body) if c in "<>`")
    assert "\\<img" in body and "\\!\\[x\\]" in body
    doc = quarantine_markdown("d", "b1", {"unknown_label": 1}, [], text)
    assert doc.startswith("# Quarantine of `d` batch `b1`: 1 row(s) refused")
    assert "| unknown\\_label | 1 |" in doc and "## Refused rows (1 of 1 shown)" in doc
