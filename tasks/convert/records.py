"""What a reader yields: a :class:`Record` (a row that parsed, values still raw), a
:class:`Problem` (a row that did not, with its rule), or raises :class:`Unreadable` (the
whole source cannot be read: one quarantine row for the object)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Record:
    row: int
    id: Any
    label: Any
    image: Any            # encoded bytes, base64 str, or an ndarray of pixels (Zarr)
    raw: bytes | None = None
    # The last record of a text file without a final newline: if it fails a check, the
    # likely cause is a cut-off upload, and the rule says so (truncated_file).
    tail_cut: bool = False
    # Typed fields: field name -> raw value (``values.ABSENT`` where the source lacks the
    # column); the target's raw value is ``label``. None for the shorthand (``image``).
    values: dict[str, Any] | None = None


@dataclass
class Problem:
    row: int
    rule: str
    message: str
    raw: bytes | None = None
    id: Any = None
    label: Any = None


class Unreadable(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message
