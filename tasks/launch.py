"""One training run over several processes of this machine (one per GPU, or gloo ranks on
the CPU): ``torchrun`` launched from the run, each rank the plain trainer
(``python -m shardline.trainer``), rank 0's result read back. The flow calls it for a run
with ``processes > 1`` and posts the same artifacts and promotion as for one process (rank 0
saves and promotes; ``trainer.candidate``).

The config goes to the ranks as the JSON of the parsed ``Config`` (so every rank trains on
exactly what the flow validated) and the store settings as the ``SHARDLINE_*`` / ``AWS_*``
variables the trainer reads; the ranks' log lines are handed to ``log`` as they come.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from shardline.core.config import Config, StoreSettings, config_to_dict
from shardline.core.errors import ShardlineError
from shardline.trainer.result import TrainResult


class LaunchFailed(ShardlineError):
    """The ranks did not finish with a result."""


def processes_for(requested: int | None) -> int:
    """``requested`` processes, or (0 / None) one per visible CUDA device, at least one."""
    if requested:
        return requested
    import torch

    return max(torch.cuda.device_count(), 1)


def rank_env(store: StoreSettings, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({"SHARDLINE_BUCKET": store.bucket, "AWS_DEFAULT_REGION": store.region})
    for name, value in (("SHARDLINE_S3_ENDPOINT_URL", store.endpoint_url),
                        ("AWS_ACCESS_KEY_ID", store.access_key),
                        ("AWS_SECRET_ACCESS_KEY", store.secret_key)):
        if value:
            env[name] = value
    return env


def torchrun_command(config: Path, version: int, processes: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(processes), "-m", "shardline.trainer", "--config",
            str(config), "--dataset-version", str(version), "--json"]


def train_ranks(cfg: Config, store: StoreSettings, version: int, processes: int,
                log: Callable[[str], None] = print, timeout_s: float | None = None
                ) -> TrainResult:
    """Train ``version`` of ``cfg`` on ``processes`` ranks; rank 0's :class:`TrainResult`.

    Raises:
        LaunchFailed: a rank failed (the message holds the last lines it logged) or rank 0
            printed no result.
    """
    tail: list[str] = []
    with tempfile.TemporaryDirectory(prefix="shardline-ranks-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(config_to_dict(cfg)))
        proc = subprocess.Popen(torchrun_command(config, version, processes),
                                env=rank_env(store), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

        chunks: list[str] = []

        def pump_err() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                tail[:] = [*tail[-19:], line.rstrip()]
                log(line.rstrip())

        def pump_out() -> None:
            assert proc.stdout is not None
            chunks.append(proc.stdout.read())

        readers = [threading.Thread(target=f, daemon=True) for f in (pump_err, pump_out)]
        for r in readers:
            r.start()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise LaunchFailed(f"{processes} training ranks did not finish in {timeout_s} s; "
                               "raise the timeout or train fewer epochs") from None
        for r in readers:
            r.join(timeout=30)
        out = "".join(chunks)
    last = next((x for x in reversed(out.splitlines()) if x.startswith("{")), None)
    doc = json.loads(last) if last else {}
    if proc.returncode != 0 or "model_version" not in doc:
        said = doc.get("error") or " | ".join(tail[-5:])
        raise LaunchFailed(f"torchrun with {processes} ranks exited {proc.returncode}: "
                           f"{said}")
    return TrainResult(**doc)
