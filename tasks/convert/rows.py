"""Row checks: normalise a raw record to (id, label index, pixels) or say which rule it breaks.

Checks run in a fixed order so a row reports its first problem: id, label, image presence,
decoding, shape. Sizes are checked before the work they would make expensive (see
``limits``): a label's length before any number parsing, an image's header dimensions before
any pixel is decoded. Whatever else a value does (an exception type no check expects), the
converter turns it into a quarantine row too (``job``), so no value can fail the batch.
Duplicate ids are not checked here: that needs the whole batch and the published dataset,
so the converter does it once all rows are known.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import unicodedata
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from shardline.core.config import DatasetConfig
from shardline.tasks.convert.limits import Limits, excerpt, limits_for

_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


class RowError(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


@dataclass(frozen=True)
class Normaliser:
    """Per-dataset state for row checks (class lookup, expected shape)."""

    cfg: DatasetConfig
    limits: Limits | None = None

    @property
    def lim(self) -> Limits:
        return self.limits or limits_for(self.cfg)

    @property
    def shape(self) -> tuple[int, int, int]:
        h, w, c = self.cfg.image.shape
        return h, w, c

    def normalise(self, rid: Any, label: Any, image: Any) -> tuple[str, int, bytes]:
        """Returns (id, label index, HWC uint8 pixel bytes) or raises :class:`RowError`."""
        lim = self.lim
        sid = normalise_id(rid, self.cfg.id_column, lim.max_id_chars)
        idx = label_index(label, self.cfg.classes, self.cfg.label_column, lim.max_label_chars)
        pixels = decode_image(image, self.shape, self.cfg.image.column, lim)
        return sid, idx, pixels


# Bidirectional formatting characters (embeddings, overrides, isolates, marks): an id that
# holds one displays as another id (CVE-2021-42574's trick).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _control_char(s: str) -> tuple[int, str] | None:
    """The first C0/C1 control (NUL and DEL included) or bidi formatting character in ``s``."""
    for i, ch in enumerate(s):
        if ch in _BIDI or unicodedata.category(ch) == "Cc":
            return i, ch
    return None


def normalise_id(value: Any, column: str, max_chars: int = 512) -> str:
    """The row's id as a string: integers and integral floats as digits (``1.0`` -> ``"1"``),
    strings with surrounding whitespace removed (``" 1"`` -> ``"1"``) and otherwise kept as
    they are (``"01"`` stays ``"01"``). Raises :class:`RowError` ``missing_id`` (null, empty,
    boolean), ``bad_id`` (another type, NaN/inf, a control or bidi-override character inside)
    or ``id_too_long``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise RowError("missing_id", f"column {column!r} is missing or null")
    if isinstance(value, bool):
        raise RowError("missing_id", f"column {column!r} holds a boolean ({value}), not an id")
    if not isinstance(value, str | bytes | int | float | np.integer):
        raise RowError("bad_id", f"column {column!r} holds {type(value).__name__} "
                       f"{excerpt(value)}; an id is a string or an integer")
    if isinstance(value, float) and not math.isfinite(value):
        raise RowError("bad_id", f"column {column!r} holds {value}; not an id")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and abs(value) >= 10 ** min(max_chars, 4000):
        raise RowError("id_too_long", f"column {column!r} holds an integer of more than "
                       f"{max_chars} digits ({excerpt(value)}); limits.max_id_chars")
    raw = str(value)
    if isinstance(value, str) and (bad := _control_char(raw.strip(" \t\r\n"))) is not None:
        at, ch = bad
        raise RowError("bad_id", f"column {column!r} holds control character U+{ord(ch):04X} "
                       f"at position {at} ({excerpt(raw, 40)}); ids are the dataset's join "
                       "key: remove control and bidi-override characters from the ids")
    sid = raw.strip()
    if len(sid) > max_chars:
        raise RowError("id_too_long", f"column {column!r} is {len(sid)} characters "
                       f"({excerpt(sid, 40)}); the limit is {max_chars} (limits.max_id_chars)")
    if not sid:
        raise RowError("missing_id", f"column {column!r} is empty")
    return sid


def label_index(value: Any, classes: tuple[str, ...], column: str,
                max_chars: int = 256) -> int:
    """A class name, or an index into ``classes`` (int, or a string of ASCII digits).

    Never converts a value it has not bounded first: a string longer than ``max_chars`` is
    refused before any parsing, only ASCII digits are parsed as an index (``"²".isdigit()``
    is true, ``int("²")`` fails), and a number is compared as is (a 400-digit JSON integer
    overflows ``float``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        raise RowError("missing_label", f"column {column!r} is missing or null")
    n = len(classes)
    if isinstance(value, str):
        if len(value) > max_chars:
            raise RowError("label_too_long",
                           f"label is {len(value)} characters ({excerpt(value, 40)}); the "
                           f"limit is {max_chars} (limits.max_label_chars)")
        name = value.strip()
        if name in classes:
            return classes.index(name)
        if name.isascii() and name.isdigit() and len(name) <= 9 and int(name) < n:
            return int(name)
    elif isinstance(value, int | np.integer) and not isinstance(value, bool):
        if 0 <= value < n:
            return int(value)
    elif (isinstance(value, float | np.floating) and math.isfinite(value)
          and float(value).is_integer() and 0 <= value < n):
        return int(value)
    shown = classes if len(classes) <= 12 else (*classes[:12], "...")
    raise RowError("unknown_label",
                   f"label {repr(value) if isinstance(value, str) else excerpt(value, 60)} "
                   f"in column {column!r} is neither a class name {list(shown)} nor an index "
                   f"0..{n - 1}; fix the label, or append the class to dataset.classes")


def b64_payload(value: Any) -> bytes:
    """Bytes as they are; a string (plain or a ``data:`` URI) decoded from base64
    (binascii.Error or ValueError if it is not base64)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    text = value.strip()
    if text.startswith("data:") and "," in text:
        text = text.split(",", 1)[1]
    return base64.b64decode(text, validate=True)


def _image_bytes(value: Any, column: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview | str):
        try:
            return b64_payload(value)
        except (binascii.Error, ValueError) as exc:
            raise RowError("undecodable_image",
                           f"column {column!r} is not valid base64: {exc}") from exc
    raise RowError("undecodable_image",
                   f"column {column!r} holds {type(value).__name__}; expected encoded "
                   "PNG/JPEG bytes (base64 in JSONL/CSV)")


def _to_array(img: Image.Image) -> np.ndarray:
    if img.mode == "1":
        img = img.convert("L")
    elif img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode not in _CHANNELS:
        raise RowError("wrong_shape", f"image mode {img.mode} is not 8-bit L/LA/RGB/RGBA")
    arr = np.asarray(img, dtype=np.uint8)
    return arr.reshape(arr.shape[0], arr.shape[1], _CHANNELS[img.mode])


def _open_checked(data: bytes, shape: tuple[int, int, int], lim: Limits) -> np.ndarray:
    """Decode ``data`` after checking the header's dimensions: a header that declares more
    than ``max_pixels`` or another size than ``shape`` is refused before decoding (a
    decompression bomb is a few hundred bytes declaring gigapixels)."""
    # Only the two formats the dataset contract names: every other Pillow decoder (TIFF,
    # PSD, ICO, ...) is attack surface nobody asked for.
    with Image.open(io.BytesIO(data), formats=("PNG", "JPEG")) as img:
        w, h = img.size
        if w * h > lim.max_pixels:
            raise RowError("image_too_large",
                           f"the image header declares {w} x {h} = {w * h} pixels; the limit "
                           f"is {lim.max_pixels} (limits.max_pixels); not decoded")
        if (h, w) != shape[:2]:
            raise RowError("wrong_shape", f"the image header declares {h} x {w} (H x W); "
                           f"expected {shape[0]} x {shape[1]}; not decoded")
        img.load()
        return _to_array(img)


def decode_image(value: Any, shape: tuple[int, int, int], column: str,
                 lim: Limits | None = None) -> bytes:
    """Decoded HWC uint8 pixels as bytes, exactly ``shape``."""
    lim = lim or Limits()
    if value is None:
        raise RowError("missing_image", f"column {column!r} is missing or null")
    if isinstance(value, np.ndarray):
        arr = value
        if arr.dtype != np.uint8:
            raise RowError("wrong_shape", f"pixels are {arr.dtype}, expected uint8")
        if arr.ndim == 2:
            arr = arr[:, :, None]
    else:
        if isinstance(value, str | bytes | bytearray | memoryview) and \
                len(value) > lim.max_row_bytes:
            raise RowError("row_too_large", f"column {column!r} holds {len(value)} bytes; the "
                           f"limit is {lim.max_row_bytes} (limits.max_row_bytes)")
        data = _image_bytes(value, column)
        if not data:
            raise RowError("missing_image", f"column {column!r} is empty")
        try:
            arr = _open_checked(data, shape, lim)
        except Image.DecompressionBombError as exc:
            raise RowError("image_too_large", f"refused by Pillow's decompression-bomb "
                           f"check: {exc}") from exc
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise RowError("undecodable_image",
                           f"not a decodable PNG/JPEG ({len(data)} bytes): {exc}") from exc
    if tuple(arr.shape) != tuple(shape):
        raise RowError("wrong_shape",
                       f"decoded image is {list(arr.shape)} (H, W, C); expected {list(shape)}")
    return np.ascontiguousarray(arr).tobytes()
