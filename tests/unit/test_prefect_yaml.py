"""prefect.yaml names no folder of the deploying machine: module entrypoints that import
from the installed package, no pull step, and only documented {{ $VARIABLES }}."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PREFECT_YAML = ROOT / "prefect.yaml"


def test_deployments_load_code_from_the_installed_package() -> None:
    from prefect.flows import Flow
    from prefect.utilities.importtools import import_object

    doc = yaml.safe_load(PREFECT_YAML.read_text())
    assert doc["pull"] == []  # no set_working_directory (Prefect's default adds one)
    for dep in doc["deployments"]:
        entry = dep["entrypoint"]
        assert re.fullmatch(r"shardline(\.\w+)+:\w+", entry), entry
        assert isinstance(import_object(entry), Flow), entry


def test_no_absolute_path_and_every_variable_is_documented() -> None:
    text = PREFECT_YAML.read_text()
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert not re.search(r"(^|[\s\"'])/(?!/)", body), "an absolute path in prefect.yaml"
    used = set(re.findall(r"\{\{ \$(\w+) \}\}", body))
    header = "\n".join(ln for ln in text.splitlines() if ln.startswith("#"))
    assert used and all(v in header for v in used), sorted(v for v in used if v not in header)
