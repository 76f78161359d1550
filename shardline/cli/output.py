"""Terminal output that survives a pipe, and one-line errors.

On a terminal, rows print as a Rich table. Anywhere else (``| cat``, a CI log, a file) they
print as plain tab-separated lines, header first, every value in full: nothing is cut at
80 columns and nothing wraps. ``--json`` prints one JSON document instead.

Errors print as one line on stderr (``error: ...``) with no traceback; ``--debug`` (or
``SHARDLINE_DEBUG=1``) adds it. Messages are printed as text, never as Rich markup, so a
``[train]`` in a message stays visible.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

_state = {"debug": os.environ.get("SHARDLINE_DEBUG", "") not in ("", "0", "false")}


def set_debug(on: bool) -> None:
    _state["debug"] = _state["debug"] or on


def debug() -> bool:
    return _state["debug"]


def is_tty() -> bool:
    return sys.stdout.isatty()


def fail(exc: BaseException, as_json: bool = False, code: int = 1) -> NoReturn:
    """Print ``exc`` as one line (``--json``: also as a JSON object on stdout); exit ``code``."""
    if debug():
        traceback.print_exception(exc, file=sys.stderr)
    if as_json:
        print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
    err.print(f"[bold red]error:[/] {escape(one_line(exc))}", soft_wrap=True)
    if not as_json:   # the lines after a headline (counts, other rules): stdout, so that
        for line in getattr(exc, "details", None) or []:   # stderr stays one line
            out.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line; unexpected errors also say how to see more."""
    from shardline.core.errors import ShardlineError

    message = " ".join(str(getattr(exc, "headline", None) or exc).split())
    if isinstance(exc, ShardlineError):
        return message or type(exc).__name__
    hint = "" if debug() else " (run with --debug for the traceback)"
    return f"{type(exc).__name__}: {message}{hint}" if message else type(exc).__name__ + hint


def plain(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, list | tuple):
        return ",".join(plain(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def rows(data: Sequence[dict[str, Any]], title: str = "", columns: Sequence[str] | None = None,
         empty: str = "nothing to show") -> None:
    """Print ``data`` (dicts with the same keys): a table on a terminal, else TSV in full."""
    if not data:
        (out if is_tty() else err).print(escape(empty), soft_wrap=True)
        return
    cols = list(columns or data[0].keys())
    if not is_tty():
        print("\t".join(cols))
        for r in data:
            print("\t".join(plain(r.get(c)).replace("\t", " ").replace("\n", " ")
                            for c in cols))
        return
    table = Table(title=escape(title) if title else None)
    for c in cols:
        numeric = isinstance(data[0].get(c), int | float) and not isinstance(data[0].get(c), bool)
        table.add_column(c, justify="right" if numeric else "left", overflow="fold")
    for r in data:
        table.add_row(*(escape(plain(r.get(c))) for c in cols))
    out.print(table)


def line(text: str) -> None:
    """A line of (markup-free) text on stdout, never wrapped or cut."""
    if is_tty():
        out.print(escape(text), soft_wrap=True)
    else:
        print(text)


def emit_json(obj: Any) -> None:
    print(json.dumps(obj, default=str))
