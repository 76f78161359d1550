"""Row checks: normalise a raw record to (id, label index, pixels) or say which rule it breaks.

Checks run in a fixed order so a row reports its first problem: id, label, image presence,
decoding, shape. Duplicate ids are not checked here: that needs the whole batch and the
published dataset, so the converter does it once all rows are known.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from shardline.core.config import DatasetConfig

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

    @property
    def shape(self) -> tuple[int, int, int]:
        h, w, c = self.cfg.image.shape
        return h, w, c

    def normalise(self, rid: Any, label: Any, image: Any) -> tuple[str, int, bytes]:
        """Returns (id, label index, HWC uint8 pixel bytes) or raises :class:`RowError`."""
        sid = normalise_id(rid, self.cfg.id_column)
        idx = label_index(label, self.cfg.classes, self.cfg.label_column)
        pixels = decode_image(image, self.shape, self.cfg.image.column)
        return sid, idx, pixels


def normalise_id(value: Any, column: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise RowError("missing_id", f"column {column!r} is missing or null")
    if isinstance(value, bool):
        raise RowError("missing_id", f"column {column!r} holds a boolean ({value}), not an id")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    sid = str(value).strip()
    if not sid:
        raise RowError("missing_id", f"column {column!r} is empty")
    return sid


def label_index(value: Any, classes: tuple[str, ...], column: str) -> int:
    """A class name, or an index into ``classes`` (int, or a string of digits)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        raise RowError("missing_label", f"column {column!r} is missing or null")
    if isinstance(value, str):
        name = value.strip()
        if name in classes:
            return classes.index(name)
        if name.isdigit() and int(name) < len(classes):
            return int(name)
    elif (isinstance(value, int | float | np.integer) and not isinstance(value, bool)
          and float(value).is_integer() and 0 <= int(value) < len(classes)):
        return int(value)
    shown = classes if len(classes) <= 12 else (*classes[:12], "...")
    raise RowError("unknown_label",
                   f"label {value!r} is neither a class name {list(shown)} nor an index "
                   f"0..{len(classes) - 1}")


def _image_bytes(value: Any, column: str) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("data:") and "," in text:
            text = text.split(",", 1)[1]
        try:
            return base64.b64decode(text, validate=True)
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


def decode_image(value: Any, shape: tuple[int, int, int], column: str) -> bytes:
    """Decoded HWC uint8 pixels as bytes, exactly ``shape``."""
    if value is None:
        raise RowError("missing_image", f"column {column!r} is missing or null")
    if isinstance(value, np.ndarray):
        arr = value
        if arr.dtype != np.uint8:
            raise RowError("wrong_shape", f"pixels are {arr.dtype}, expected uint8")
        if arr.ndim == 2:
            arr = arr[:, :, None]
    else:
        data = _image_bytes(value, column)
        if not data:
            raise RowError("missing_image", f"column {column!r} is empty")
        try:
            with Image.open(io.BytesIO(data)) as img:
                img.load()
                arr = _to_array(img)
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise RowError("undecodable_image",
                           f"not a decodable PNG/JPEG ({len(data)} bytes): {exc}") from exc
    if tuple(arr.shape) != tuple(shape):
        raise RowError("wrong_shape",
                       f"decoded image is {list(arr.shape)} (H, W, C); expected {list(shape)}")
    return np.ascontiguousarray(arr).tobytes()
