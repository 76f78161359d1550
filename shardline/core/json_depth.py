"""Nesting depth of a JSON text, found without parsing it.

Both edges that take JSON from outside use it before ``json.loads`` (whose recursion a
document nested 100,000 levels deep exhausts): the ingest readers per JSONL line and the
webhook receiver per request body."""

from __future__ import annotations


def json_depth_exceeds(text: bytes, limit: int) -> bool:
    """Whether ``text`` nests objects/arrays deeper than ``limit`` (brackets inside JSON
    strings do not count). Linear in the text, no recursion; a text with at most ``limit``
    opening brackets cannot exceed it, so the common case is two ``bytes.count`` calls."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    depth, in_str, escaped = 0, False, False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == 0x5C:          # backslash
                escaped = True
            elif ch == 0x22:          # quote
                in_str = False
        elif ch == 0x22:
            in_str = True
        elif ch in (0x5B, 0x7B):      # [ {
            depth += 1
            if depth > limit:
                return True
        elif ch in (0x5D, 0x7D):      # ] }
            depth -= 1
    return False
