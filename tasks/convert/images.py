"""Decoding a typed image field: PNG/JPEG/WebP through Pillow, TIFF (multi-band, 16-bit)
through tifffile, pixels from Zarr as they are; always to the declared dtype (uint8 or
uint16) and ``[H, W, C]``.

Dimensions are read from the header and checked (``limits.max_pixels``, the declared H and
W) before any pixel is decoded, as for the shorthand's images (``rows.decode_image``). The
bit depth is never converted: an 8-bit PNG for a uint16 field (or the reverse) is
``wrong_dtype``, since scaling would invent or drop precision.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from shardline.core.field_spec import FieldSpec, TargetSpec, target_dtype
from shardline.tasks.convert.limits import Limits
from shardline.tasks.convert.rows import RowError
from shardline.tasks.convert.values import NPY_MAGIC, _bytes_of, tensor_value

_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "I;16": 1, "I;16L": 1, "I;16B": 1,
             "I;16N": 1}


def _tiff(data: bytes, shape: tuple[int, ...], name: str, lim: Limits) -> np.ndarray:
    import tifffile

    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        series = tif.series[0]
        axes, dims = series.axes, tuple(series.shape)
        if "Y" not in axes or "X" not in axes:
            raise RowError("undecodable_image", f"field {name!r}: the TIFF has axes {axes}, "
                           "no Y and X")
        h, w = dims[axes.index("Y")], dims[axes.index("X")]
        hwc, chw = tuple(shape), (shape[2], shape[0], shape[1])
        if (h, w) != tuple(shape[:2]) and len(dims) == 3 and dims in (hwc, chw):
            # A 3-d array written without photometric / planarconfig reads back with other
            # axes (pages, samples); the declared shape says which layout it is.
            if shape[0] * shape[1] > lim.max_pixels:
                raise RowError("image_too_large", f"field {name!r}: the TIFF declares "
                               f"{shape[0]} x {shape[1]} pixels; the limit is "
                               f"{lim.max_pixels} (limits.max_pixels)")
            arr = np.asarray(series.asarray())
            return arr if dims == hwc else np.moveaxis(arr, 0, 2)
        if h * w > lim.max_pixels:
            raise RowError("image_too_large", f"field {name!r}: the TIFF declares {h} x {w} "
                           f"pixels; the limit is {lim.max_pixels} (limits.max_pixels)")
        if (h, w) != tuple(shape[:2]):
            raise RowError("wrong_shape", f"field {name!r}: the TIFF is {h} x {w} (H x W), "
                           f"expected {shape[0]} x {shape[1]}; not decoded")
        arr = series.asarray()
    band_axes = [i for i, a in enumerate(axes) if a not in "YX"]
    if len(band_axes) > 1:
        raise RowError("wrong_shape", f"field {name!r}: the TIFF has axes {axes} "
                       f"{list(dims)}; one band axis at most")
    order = [axes.index("Y"), axes.index("X"), *band_axes]
    arr = np.transpose(arr, order)
    return arr.reshape(arr.shape[0], arr.shape[1], -1)


def _pillow(data: bytes, spec: FieldSpec, name: str, lim: Limits) -> np.ndarray:
    formats = tuple(f for f in spec.formats if f != "TIFF")
    with Image.open(io.BytesIO(data), formats=formats) as opened:
        img: Image.Image = opened
        w, h = img.size
        if w * h > lim.max_pixels:
            raise RowError("image_too_large", f"field {name!r}: the header declares {w} x "
                           f"{h} pixels; the limit is {lim.max_pixels} (limits.max_pixels)")
        if (h, w) != tuple(spec.shape[:2]):
            raise RowError("wrong_shape", f"field {name!r}: the header declares {h} x {w} "
                           f"(H x W), expected {spec.shape[0]} x {spec.shape[1]}; not decoded")
        img.load()
        if img.mode == "1":
            img = img.convert("L")
        elif img.mode == "P":
            img = img.convert("RGBA" if "transparency" in img.info else "RGB")
        if img.mode not in _CHANNELS:
            raise RowError("wrong_dtype", f"field {name!r}: image mode {img.mode} is not "
                           "8-bit L/LA/RGB/RGBA or 16-bit grayscale")
        arr = np.asarray(img)
        return arr.reshape(arr.shape[0], arr.shape[1], _CHANNELS[img.mode])


def decode_encoded(data: bytes, spec: FieldSpec, name: str, lim: Limits) -> np.ndarray:
    """Decode encoded bytes (TIFF by its magic, others by Pillow) to ``H x W x C``."""
    try:
        if data[:4] in _TIFF_MAGIC:
            if "TIFF" not in spec.formats:
                raise RowError("undecodable_image", f"field {name!r}: a TIFF, and the field's "
                               f"formats are {list(spec.formats)}")
            return _tiff(data, tuple(spec.shape), name, lim)
        return _pillow(data, spec, name, lim)
    except RowError:
        raise
    except Image.DecompressionBombError as exc:
        raise RowError("image_too_large", f"field {name!r}: refused by Pillow's "
                       f"decompression-bomb check: {exc}") from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, KeyError,
            IndexError) as exc:
        raise RowError("undecodable_image", f"field {name!r}: not a decodable "
                       f"{'/'.join(spec.formats)} image ({len(data)} bytes): {exc}") from exc


def image_value(value: Any, spec: FieldSpec, name: str, lim: Limits) -> np.ndarray:
    """A typed image field's pixels, exactly its dtype and ``[H, W, C]``."""
    if isinstance(value, np.ndarray):
        arr = value[:, :, None] if value.ndim == 2 else value
    else:
        if isinstance(value, str | bytes | bytearray | memoryview) and \
                len(value) > lim.max_row_bytes:
            raise RowError("row_too_large", f"field {name!r} holds {len(value)} bytes; the "
                           f"limit is {lim.max_row_bytes} (limits.max_row_bytes)")
        if not isinstance(value, str | bytes | bytearray | memoryview):
            raise RowError("undecodable_image", f"field {name!r} holds {type(value).__name__}; "
                           "expected encoded image bytes (base64 in JSONL/CSV)")
        data = _bytes_of(value, name)
        if not data:
            raise RowError("missing_value", f"field {name!r} is empty")
        arr = decode_encoded(data, spec, name, lim)
    dt = spec.resolved_dtype
    if arr.dtype.byteorder not in "=|":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype != np.dtype(dt):
        raise RowError("wrong_dtype", f"field {name!r}: decoded pixels are {arr.dtype}, the "
                       f"field is {dt}; upload {dt} images or declare dtype = "
                       f"\"{arr.dtype}\"")
    if tuple(arr.shape) != tuple(spec.shape):
        raise RowError("wrong_shape", f"field {name!r}: decoded image is {list(arr.shape)} "
                       f"(H, W, C), expected {list(spec.shape)}")
    return np.ascontiguousarray(arr)


def decode_mask_image(data: bytes, shape: tuple[int, ...], name: str,
                      lim: Limits) -> np.ndarray:
    """A mask sent as a single-channel PNG/TIFF (8 or 16 bit): its [H, W] values."""
    spec = FieldSpec(kind="image", dtype="uint16", shape=(*shape, 1), formats=("PNG", "TIFF"))
    arr = decode_encoded(data, spec, name, lim)
    if arr.shape[2] != 1:
        raise RowError("wrong_shape", f"target {name!r}: the mask image has {arr.shape[2]} "
                       "channels; a mask is one channel of class indices")
    return arr[:, :, 0]


def mask_value(value: Any, t: TargetSpec, classes: tuple[str, ...], name: str,
               lim: Limits) -> np.ndarray:
    """An [H, W] integer mask of class indices (a PNG, NPY, nested lists or an ndarray)."""
    dt = target_dtype(t, len(classes))
    if isinstance(value, bytes | bytearray | memoryview | str) and not (
            isinstance(value, str) and value.lstrip().startswith("[")):
        data = _bytes_of(value, name)
        if not data.startswith(NPY_MAGIC):
            value = decode_mask_image(data, tuple(t.shape), name, lim)
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        value = value.astype(np.int64)     # a uint8 PNG mask for an int16 field, and back
    arr = tensor_value(value, "int64", tuple(t.shape), name, lim)
    bad = (arr < 0) | (arr >= len(classes))
    if bad.any():
        raise RowError("unknown_label", f"target {name!r}: {int(bad.sum())} pixel(s) hold "
                       f"class indices outside 0..{len(classes) - 1} (e.g. "
                       f"{int(arr[bad][0])}); fix the mask or append classes")
    return arr.astype(dt)
