"""The README's Python API snippet runs as written (against a moto bucket holding a
``digits`` dataset) and yields a torch batch."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.trainer_data import digits_config, publish_version

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_snippet_yields_a_torch_batch(store: ObjectStore, stack_env: StoreSettings,
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    monkeypatch.setenv("SHARDLINE_HOME", str(tmp_path / "no-stack"))
    monkeypatch.setenv("SHARDLINE_CACHE_DIR", str(tmp_path / "cache"))
    cfg = digits_config(name="digits")
    publish_version(store, cfg.dataset, np.arange(700))
    section = README.read_text().split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    scope: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)
    batch = scope["batch"]
    assert isinstance(batch, dict)
    assert batch["image"].dtype == torch.uint8 and batch["image"].shape == (256, 1, 8, 8)
    assert batch["label"].shape == (256,) and len(scope["df"]) == 700  # type: ignore[arg-type]
    scope["loader"].close()  # type: ignore[attr-defined]
