"""Turn pydantic validation errors into one line a user can act on.

Each problem is written as ``[section] key: what is wrong, got <value>``, e.g.
``[train] lr: expected a number, got 'x'`` or ``[train] epoch: unknown key; known keys:
batch_size, epochs, ...``. Section names are the TOML tables (``[dataset.image]``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

_EXPECTED = {
    "float_type": "a number", "float_parsing": "a number", "int_type": "an integer",
    "int_from_float": "an integer", "int_parsing": "an integer", "string_type": "a string",
    "bool_type": "true or false", "tuple_type": "a list", "list_type": "a list",
    "dataclass_type": "a table", "dict_type": "a table",
}


def _field_names(cls: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "path"]


def _section_class(root: Any, section: Sequence[str]) -> Any:
    """The dataclass describing the table at ``section`` (None if it is not one)."""
    cls = root
    parts = list(section)
    while parts:
        part = parts.pop(0)
        if not dataclasses.is_dataclass(cls):
            return None
        cls = _table_of(typing.get_type_hints(cls).get(part))
        if typing.get_origin(cls) is dict:   # a table of named tables ([dataset.fields.x])
            cls = _table_of(typing.get_args(cls)[1])
            if parts:
                parts.pop(0)
    return cls if dataclasses.is_dataclass(cls) else None


def _table_of(hint: Any) -> Any:
    """``X`` for ``X | None`` and annotated forms of a table's class; else ``hint``."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return hint


def _describe(err: dict[str, Any], root: Any) -> str:
    loc = [p for p in err["loc"] if p != "__root__"]
    kind, value = err["type"], err.get("input")
    # The key (or list index) at fault and the table it sits in.
    keys = [p for p in loc if isinstance(p, str)]
    key_at = max((i for i, p in enumerate(loc) if isinstance(p, str)), default=-1)
    section = ".".join(keys[:-1]) if keys else ""
    key = ".".join(str(p) for p in loc[key_at:]) if key_at >= 0 else ""
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        cls = _section_class(root, keys[:-1])
        known = ", ".join(_field_names(cls)) if cls is not None else "?"
        what = f"unknown key; known keys: {known}"
    elif kind in ("missing", "missing_argument", "missing_keyword_only_argument"):
        what = "required key is missing"
    elif kind in _EXPECTED:
        what = f"expected {_EXPECTED[kind]}, got {value!r}"
    elif kind == "literal_error":
        what = f"must be {err.get('ctx', {}).get('expected')}, got {value!r}"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        what = f"{_bound(kind, err.get('ctx', {}))}, got {value!r}"
    elif kind in ("value_error", "assertion_error"):
        what = str(err.get("ctx", {}).get("error", err["msg"]))
    else:
        what = f"{err['msg'][0].lower()}{err['msg'][1:]}, got {value!r}"
    if kind in ("value_error", "assertion_error") and keys and \
            _section_class(root, keys) is not None:   # a whole table's rule: name the table
        section, key = ".".join(keys), ""
    where = f"[{section or 'config'}]"
    return f"{where} {key}: {what}" if key else f"{where} {what}"


def _bound(kind: str, ctx: dict[str, Any]) -> str:
    words = {"greater_than": ("gt", "must be > "), "greater_than_equal": ("ge", "must be >= "),
             "less_than": ("lt", "must be < "), "less_than_equal": ("le", "must be <= ")}
    name, text = words[kind]
    return f"{text}{ctx.get(name)}"


def describe_validation_error(exc: ValidationError, root: Any) -> str:
    """All problems of ``exc`` on one line, each naming its ``[section] key``.

    Args:
        exc: raised while validating ``root`` (a pydantic dataclass).
        root: the dataclass validated; used to list the known keys of a table.
    """
    return "; ".join(_describe(dict(err), root) for err in exc.errors())
