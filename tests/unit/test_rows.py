import base64
import io

import numpy as np
import pytest
from PIL import Image

from shardline.tasks.convert.rows import RowError, decode_image, label_index, normalise_id

CLASSES = ("cat", "dog", "bird")


def png(arr, mode):
    buf = io.BytesIO()
    Image.fromarray(arr, mode=mode).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize("value,expected", [("dog", 1), ("2", 2), (0, 0), (2.0, 2), (" cat ", 0)])
def test_labels_by_name_or_index(value, expected):
    assert label_index(value, CLASSES, "label") == expected


@pytest.mark.parametrize("value,rule", [(None, "missing_label"), ("", "missing_label"),
                                        ("fish", "unknown_label"), (3, "unknown_label"),
                                        (-1, "unknown_label"), (True, "unknown_label"),
                                        (1.5, "unknown_label")])
def test_bad_labels_name_rule_and_value(value, rule):
    with pytest.raises(RowError) as e:
        label_index(value, CLASSES, "label")
    assert e.value.rule == rule
    if rule == "unknown_label":      # the value, the column, the classes and the fix
        assert repr(value) in e.value.message and "cat" in e.value.message
        assert "column 'label'" in e.value.message
        assert "append the class to dataset.classes" in e.value.message


def test_ids_normalise_to_strings():
    assert normalise_id(7, "id") == "7"
    assert normalise_id(7.0, "id") == "7"
    assert normalise_id(" a1 ", "id") == "a1"
    for bad in (None, "", "  ", float("nan"), True):
        with pytest.raises(RowError) as e:
            normalise_id(bad, "id")
        assert e.value.rule == "missing_id"
    # The documented rules: integral floats as digits, surrounding whitespace dropped, leading
    # zeros kept (a string id is never parsed as a number).
    assert normalise_id(1.0, "id") == "1"
    assert normalise_id("\t 1\r\n", "id") == "1"
    assert normalise_id("01", "id") == "01"


@pytest.mark.parametrize(("value", "codepoint", "at"), [
    ("x\u0000y", "U+0000", 1),      # NUL: PostgreSQL refuses it, C consumers truncate at it
    ("\x01\x7f", "U+0001", 0),     # C0 and DEL
    ("a\x85b", "U+0085", 1),        # C1 (NEL)
    ("\x1fx", "U+001F", 0),         # a C0 control that str.strip() would silently drop
    ("abc\u202egpj.exe", "U+202E", 3),  # right-to-left override
    ("id\u2066x\u2069", "U+2066", 2),  # isolate
])
def test_control_and_bidi_characters_in_ids_are_bad_id(value: str, codepoint: str,
                                                       at: int) -> None:
    with pytest.raises(RowError) as e:
        normalise_id(value, "id")
    assert e.value.rule == "bad_id"
    assert f"control character {codepoint} at position {at}" in e.value.message
    assert "remove control and bidi-override characters" in e.value.message


def test_printable_unicode_ids_are_kept() -> None:
    for ok in ("café-1", "画像_7", "a b", "emoji-\U0001f600", "zwj\u200d"):
        assert normalise_id(ok, "id") == ok


def test_decode_png_bytes_and_base64_to_exact_pixels():
    arr = np.arange(64, dtype=np.uint8).reshape(8, 8)
    raw = png(arr, "L")
    assert decode_image(raw, (8, 8, 1), "image") == arr.tobytes()
    assert decode_image(base64.b64encode(raw).decode(), (8, 8, 1), "image") == arr.tobytes()
    uri = "data:image/png;base64," + base64.b64encode(raw).decode()
    assert decode_image(uri, (8, 8, 1), "image") == arr.tobytes()
    rgb = np.zeros((4, 5, 3), np.uint8)
    rgb[..., 2] = 200
    assert decode_image(png(rgb, "RGB"), (4, 5, 3), "image") == rgb.tobytes()


@pytest.mark.parametrize("value,rule", [
    (None, "missing_image"), (b"", "missing_image"), (b"not an image", "undecodable_image"),
    ("%%%", "undecodable_image"), (123, "undecodable_image"),
])
def test_undecodable_images(value, rule):
    with pytest.raises(RowError) as e:
        decode_image(value, (8, 8, 1), "image")
    assert e.value.rule == rule


def test_truncated_png_is_undecodable():
    raw = png(np.random.default_rng(0).integers(0, 255, (8, 8), dtype=np.uint8), "L")
    with pytest.raises(RowError) as e:
        decode_image(raw[: len(raw) // 2], (8, 8, 1), "image")
    assert e.value.rule == "undecodable_image"


def test_wrong_shape_reports_found_and_expected():
    with pytest.raises(RowError) as e:
        decode_image(png(np.zeros((8, 8, 3), np.uint8), "RGB"), (8, 8, 1), "image")
    assert e.value.rule == "wrong_shape"
    assert "[8, 8, 3]" in e.value.message and "[8, 8, 1]" in e.value.message
    with pytest.raises(RowError) as e:
        decode_image(np.zeros((8, 8), np.float32), (8, 8, 1), "image")
    assert e.value.rule == "wrong_shape"
