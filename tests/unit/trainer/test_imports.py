"""trainer/ must run in a slim GPU image and under torchrun: no Prefect, no PySpark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_trainer_imports_neither_prefect_nor_pyspark() -> None:
    code = ("import json, sys, trainer.run, trainer.__main__; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    loaded = set(json.loads(out.stdout))
    assert "torch" in loaded and "trainer" in loaded          # the probe itself worked
    assert not loaded & {"prefect", "pyspark", "great_expectations", "flows", "tasks"}
