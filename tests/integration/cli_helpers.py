"""Running the ``shardline`` command as a user does (a subprocess) against a test bucket."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from shardline.core.config import StoreSettings

EXE = str(Path(sys.executable).parent / "shardline")


def cli_env(settings: StoreSettings, tmp_path: Path) -> dict[str, str]:
    """This process's environment without any shardline, Prefect API or AWS setting of the
    developer's, pointed at ``settings``' bucket, with no embedded stack (a home folder
    that does not exist) and a short reachability check."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("SHARDLINE_", "PREFECT_API", "AWS_"))}
    return {**base, "SHARDLINE_HOME": str(tmp_path / "no-stack"),
            "SHARDLINE_BUCKET": settings.bucket,
            "SHARDLINE_S3_ENDPOINT_URL": str(settings.endpoint_url),
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "SHARDLINE_CHECK_TIMEOUT": "3"}
