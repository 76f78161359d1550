"""What a notebook reader does with ``pip install shardline`` (the core, no extras): run by
``test_packaging`` as a script under the installed wheel, in another interpreter, and
printed as one JSON line. Stdlib and shardline only: it runs where the tests' own
dependencies are not installed.

    python reader_probe.py DATASET CONFIG_TOML
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from typing import Any

# What the core install must neither need nor load (the extras' packages).
HEAVY = ("pyspark", "prefect", "great_expectations", "torch", "torchdata", "zarr",
         "matplotlib", "moto")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:   # the tests' hiding finder refuses it
        return False


def _cli(*args: str) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-m", "shardline.cli.main", *args],
                         capture_output=True, text=True, timeout=120)
    return {"code": run.returncode, "out": run.stdout, "err": run.stderr}


def main(name: str, config: str) -> dict[str, Any]:
    import shardline

    ds = shardline.open_dataset(name)
    frame = ds.to_pandas()
    try:
        ds.torch_loader(batch_size=8)
        loader = ""
    except Exception as exc:   # the one line a reader without torch gets
        loader = f"{type(exc).__name__}: {exc}"
    try:
        shardline.load_model(name)
        model = ""
    except Exception as exc:
        model = f"{type(exc).__name__}: {exc}"
    return {"python": list(sys.version_info[:2]), "models": shardline.list_models(name),
            "model": model, "file": shardline.__file__,
            "version": ds.version, "rows": len(frame), "ids": sorted(frame["id"].tolist()),
            "versions": [v["version"] for v in shardline.list_dataset_versions(name)],
            "loader": loader, "installed": [m for m in HEAVY if _found(m)],
            "loaded": sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY)),
            "cli_version": _cli("--version"), "cli_versions": _cli("versions", "-c", config),
            "cli_quarantine": _cli("quarantine", "-c", config),
            "cli_models": _cli("models", "-c", config), "cli_ingest": _cli("ingest", "-c", config)}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
