"""Input limits: what one object or row may cost before the expensive work starts.

Every limit is checked *before* the work it protects (parsing, decoding, allocating), so a
hostile value ends as a quarantine row with a rule naming the limit, never as an exception
that fails the Spark task and, with it, the batch:

==================  =========================================  ==========================
limit               checked                                    rule when broken
==================  =========================================  ==========================
max_object_bytes    the listing's size, before a whole GET     ``object_too_large``
max_row_bytes       a JSONL line / CSV record / image value,   ``row_too_large``
                    before JSON parsing or base64 decoding
max_json_depth      bracket nesting of a JSONL line, before    ``too_deeply_nested``
                    ``json.loads`` (which recurses)
max_pixels          the image header's width x height, before  ``image_too_large``
                    any pixel is decoded
max_label_chars     a label's text, before any number parsing  ``label_too_long``
max_id_chars        an id's text                               ``id_too_long``
==================  =========================================  ==========================

The defaults suit image datasets of up to a few megapixels per image. A dataset sets its
own in ``[dataset.limits]`` (``core.config.LimitsSpec``, same field names); a config object
without a ``limits`` field gets the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limits:
    max_object_bytes: int = 4 << 30      # whole-object reads (CSV, images, unsplit JSONL)
    max_row_bytes: int = 32 << 20        # one JSONL line, CSV record or encoded image
    max_json_depth: int = 64             # nesting of objects/arrays within one JSONL line
    max_pixels: int = 50_000_000         # width x height from the image header
    max_label_chars: int = 256
    max_id_chars: int = 512

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"limits.{f.name} must be a positive integer, got {v!r}")


DEFAULT_LIMITS = Limits()


def limits_for(cfg: Any) -> Limits:
    """The dataset's limits: its ``limits`` field where the config has one, else defaults."""
    found = getattr(cfg, "limits", None)
    if found is None:
        return DEFAULT_LIMITS
    if isinstance(found, Limits):
        return found
    return Limits(**{f.name: getattr(found, f.name) for f in fields(Limits)
                     if getattr(found, f.name, None) is not None})


def excerpt(value: object, n: int = 120) -> str:
    """A short printable excerpt of ``value`` for messages: never the whole of a huge or
    binary value (a 5,000-digit label is shown by its first digits and its length)."""
    if isinstance(value, bytes | bytearray | memoryview):
        b = bytes(value[:n])
        text, size = b.decode("utf-8", "backslashreplace"), len(value)
    else:
        try:
            text = value if isinstance(value, str) else repr(value)
        except Exception as exc:   # a repr that itself fails (huge int, hostile object)
            text = f"<{type(value).__name__}: {type(exc).__name__}>"
        size = len(text)
        text = text[:n]
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if size <= n else f"{text}... ({size} chars)"
