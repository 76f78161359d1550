"""What a person sees of refused rows in the Prefect UI: key, row, rule, an excerpt of the
value and, for image rows, a small thumbnail (or a mark saying why there is none).

The thumbnails are PNGs inlined as ``data:image/png;base64`` URIs in a markdown artifact.
Both Prefect 3.8 UIs render them: the V2 (React) markdown view lets ``data:image/`` through
its URL transform and sanitizer for ``<img src>`` only, and the V1 (Vue) view renders image
tokens as ``<img>`` directly. Nothing else is needed on the server or in the bucket.

The work is bounded whatever was uploaded: at most :data:`MAX_ROWS` rows are read from the
quarantine shards (record batch by record batch, never a whole shard), at most
:data:`MAX_THUMBS` are decoded; only PNG and JPEG headers are opened, and an image is decoded
only when its header declares at most :data:`MAX_PREVIEW_PIXELS` (and the dataset's
``max_pixels``) and its encoded bytes fit :data:`MAX_PREVIEW_BYTES`: a decompression bomb
gets a mark, never a decode.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shardline.core.config import StoreSettings
from shardline.tasks.convert.limits import DEFAULT_LIMITS, Limits, excerpt

MAX_ROWS = 25                 # rows listed per artifact
MAX_THUMBS = 12               # thumbnails decoded per artifact
THUMB_PX = 48                 # longest side of a thumbnail
MAX_PREVIEW_BYTES = 4 << 20   # encoded image bytes a thumbnail is made from
MAX_PREVIEW_PIXELS = 4_000_000
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")


@dataclass(frozen=True)
class Preview:
    """A thumbnail (``png`` set) or a mark (``png`` None) with the reason in ``text``."""

    text: str
    png: bytes | None = None

    def markdown(self) -> str:
        if self.png is None:
            return f"*{md(self.text)}*"
        return (f"![{md(self.text)}](data:image/png;base64,"
                f"{base64.b64encode(self.png).decode()})")


@dataclass(frozen=True)
class QuarantineSource:
    """Where the refused rows of one batch are: quarantine shard keys in the bucket, and
    what is needed to find the image in a row (the column, the dataset's limits)."""

    store: StoreSettings
    shards: tuple[str, ...]
    image_column: str = "image"
    limits: Limits = DEFAULT_LIMITS


def md(text: str) -> str:
    """``text`` as literal markdown inside a table cell: one line, specials escaped."""
    text = " ".join(str(text).split())
    return "".join("\\" + c if c in "\\`*_{}[]()<>#+!|~" else c for c in text)


def _is_image(data: bytes) -> bool:
    return data.startswith(_MAGIC)


def _b64_image(text: str) -> bytes | None:
    text = text.strip()
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data


def image_value(raw: bytes | None, column: str) -> bytes | str:
    """The encoded image held by a quarantined row's ``raw`` value, or why there is none:
    the bytes themselves (an image file), the column of a JSON line (base64), or a CSV field
    that decodes to PNG/JPEG."""
    if not raw:
        return "no value kept"
    if _is_image(raw):
        return raw
    if raw.lstrip()[:1] == b"{":
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            return "not an image: the row is not valid JSON"
        value = obj.get(column) if isinstance(obj, dict) else None
        if value is None:
            return f"no image: {column!r} is missing"
        if not isinstance(value, str):
            return f"not an image: {column!r} holds {type(value).__name__}"
        data = _b64_image(value)
        return data if data else f"not an image: {column!r} is not base64"
    for field in raw.split(b","):     # a CSV record joined by commas
        if len(field) >= 16:
            data = _b64_image(field.decode("ascii", "replace"))
            if data and _is_image(data):
                return data
    return "not an image"


def thumbnail(data: bytes, limits: Limits = DEFAULT_LIMITS) -> Preview:
    """A PNG of at most ``THUMB_PX`` a side (smaller images scaled up by a whole factor,
    nearest pixel, so they stay visible), or a mark. Only PNG/JPEG are opened, and pixels
    are decoded only after the header's dimensions passed the limits."""
    from PIL import Image, UnidentifiedImageError

    if not _is_image(data):
        return Preview("not an image (no PNG/JPEG signature)")
    if len(data) > MAX_PREVIEW_BYTES:
        return Preview(f"not previewed: {len(data)} bytes encoded")
    cap = min(limits.max_pixels, MAX_PREVIEW_PIXELS)
    try:
        with Image.open(io.BytesIO(data), formats=("PNG", "JPEG")) as img:
            w, h = img.size
            if w * h > cap:
                return Preview(f"not previewed: the header declares {w} x {h} pixels")
            if img.format == "JPEG":
                img.draft("RGB", (THUMB_PX, THUMB_PX))   # decode at a reduced scale
            img.load()
            small = img.convert("RGBA" if "A" in img.mode or "transparency" in img.info
                                else "RGB" if img.mode not in ("L", "1") else "L")
    except Image.DecompressionBombError:
        return Preview("not previewed: refused as a decompression bomb")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        return Preview(f"unreadable image: {excerpt(str(exc), 60)}")
    small.thumbnail((THUMB_PX, THUMB_PX))
    scale = THUMB_PX // max(small.size)
    if scale > 1:   # an 8 x 8 digit would be a dot: whole-number steps, nearest pixel
        small = small.resize((small.width * scale, small.height * scale),
                             Image.Resampling.NEAREST)
    out = io.BytesIO()
    small.save(out, format="PNG", optimize=True)
    return Preview(f"{w} x {h} image", out.getvalue())


def preview(row: dict[str, Any], column: str, limits: Limits = DEFAULT_LIMITS) -> Preview:
    value = image_value(row.get("raw"), column)
    return Preview(value) if isinstance(value, str) else thumbnail(value, limits)


def read_rows(src: QuarantineSource, n: int = MAX_ROWS) -> list[dict[str, Any]]:
    """The first ``n`` rows of the quarantine shards, reading only the record batches
    needed (ranged reads), not whole shards."""
    import pyarrow.ipc as ipc

    from shardline.api.access import arrow_filesystem

    fs = arrow_filesystem(src.store)
    out: list[dict[str, Any]] = []
    for key in src.shards:
        with fs.open_input_file(f"{src.store.bucket}/{key}") as f:
            reader = ipc.open_file(f)
            for i in range(reader.num_record_batches):
                out += reader.get_batch(i).slice(0, n - len(out)).to_pylist()
                if len(out) >= n:
                    return out
    return out


def _source_image(src: QuarantineSource, key: str) -> bytes | str:
    """An image-file source (one row, no value kept in the quarantine record): the object
    itself, when it is small enough to preview."""
    from shardline.core.errors import StoreError
    from shardline.core.store import ObjectStore

    store = ObjectStore(src.store)
    try:
        info = store.head(key)
        if info is None:
            return "the source object is gone"
        if info.size > MAX_PREVIEW_BYTES:
            return f"not previewed: the object is {info.size} bytes"
        return store.get_bytes(key)
    except StoreError as exc:
        return f"source not readable: {excerpt(str(exc), 60)}"


def previews(src: QuarantineSource, rows: Iterable[dict[str, Any]],
             max_thumbs: int = MAX_THUMBS) -> list[tuple[dict[str, Any], Preview]]:
    """Each row with its preview; rows after ``max_thumbs`` thumbnails get a mark."""
    out, made = [], 0
    for row in rows:
        raw = row.get("raw")
        if made >= max_thumbs:
            p = Preview(f"not previewed: {max_thumbs} thumbnails shown already")
        elif not raw and str(row.get("source_key", "")).lower().endswith(IMAGE_SUFFIXES):
            value = _source_image(src, row["source_key"])
            p = Preview(value) if isinstance(value, str) else thumbnail(value, src.limits)
        else:
            p = preview(row, src.image_column, src.limits)
        made += p.png is not None
        out.append((row, p))
    return out


def rows_markdown(items: list[tuple[dict[str, Any], Preview]], total: int) -> str:
    """The per-row table: preview, key, row, rule, value excerpt."""
    if not items:
        return ""
    lines = [f"## Refused rows ({len(items)} of {total} shown)", "",
             "| preview | key | row | rule | value |", "|---|---|---|---|---|"]
    for row, p in items:
        value = excerpt(row.get("raw") or b"", 80) if row.get("raw") else row.get("message", "")
        lines.append(f"| {p.markdown()} | {md(row.get('source_key', ''))} | "
                     f"{row.get('source_row', '')} | {md(row.get('rule', ''))} | "
                     f"{md(value)} |")
    return "\n".join(lines) + "\n"


def quarantine_source(cfg: Any, store: StoreSettings, shards: Iterable[Any]
                      ) -> QuarantineSource:
    """For a dataset config and the batch's quarantine shards (anything with ``.path``)."""
    from shardline.tasks.convert.limits import limits_for

    return QuarantineSource(store, tuple(s.path for s in shards), cfg.image.column,
                            limits_for(cfg))
