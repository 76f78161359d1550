"""Where a document came from: the code version and the time it was written."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from pathlib import Path


def _package_version() -> str:
    # from the installed distribution, not ``shardline.__version__``: the core imports
    # nothing outside shardline.core (the package root pulls in the public API)
    try:
        return metadata.version("shardline")
    except metadata.PackageNotFoundError:
        return "0+unknown"


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
    version = _package_version()
    return f"{version}+{sha}" if sha else version
