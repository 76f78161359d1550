"""Where a document came from: the code version and the time it was written."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from shardline import __version__


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@cache
def code_version() -> str:
    """shardline's version plus the git commit when running from a checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{__version__}+{sha}" if sha else __version__
