"""Running the ``shardline`` command as a user does (a subprocess) against a test bucket."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from shardline.core.config import Config, StoreSettings

EXE = str(Path(sys.executable).parent / "shardline")
DIGITS = """
[dataset]
name = "{name}"
incoming = "incoming/{name}/"
classes = ["0","1","2","3","4","5","6","7","8","9"]
[dataset.image]
shape = [8, 8, 1]
"""


def run_cli(env: dict[str, str], *args: str, timeout: float = 300
              ) -> subprocess.CompletedProcess[str]:
    """``shardline ARGS`` as a user runs it: a subprocess, stdout and stderr captured."""
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def write_config(tmp_path: Path, name: str, max_quarantine: float | None = None) -> Path:
    """An 8x8 digits dataset ``name`` (the shorthand); ``max_quarantine`` sets
    ``validation.max_quarantine_fraction`` (else the default, 5%)."""
    p = tmp_path / f"{name}.toml"
    text = DIGITS.format(name=name)
    if max_quarantine is not None:
        text += f"[dataset.validation]\nmax_quarantine_fraction = {max_quarantine}\n"
    p.write_text(text)
    return p


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


def cli_runner(cfg: Config, settings: StoreSettings, tmp_path: Path, *command: str
               ) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(*args)``: ``shardline COMMAND ARGS -c F`` as a user runs it (a subprocess, stdout
    a pipe), F being ``cfg`` written as TOML, against ``settings``' bucket."""
    from tests.integration.trainer_data import config_toml

    path = tmp_path / "dataset.toml"
    path.write_text(config_toml(cfg))
    env = cli_env(settings, tmp_path)

    return lambda *args: run_cli(env, *command, *args, "-c", str(path))
