"""Architecture rules as tests: one for each "never" of docs/design.md ("Layering").

Imports are read from the source (every ``import`` / ``from`` statement, function-level ones
included), so a rule breaks the moment someone writes the import, not only when a test
happens to execute it. One probe also imports the trainer in a fresh interpreter and looks
at what it actually loaded.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "shardline"
# The namespace's sub-packages that live in top-level folders (installed as shardline.X).
MAPPED = ("flows", "tasks", "trainer", "infra", "bench")


def _module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    found = (Path(d) / f for d, _, fs in os.walk(PKG, followlinks=True) for f in fs)
    for path in sorted(p for p in found if p.suffix == ".py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = ["shardline", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


MODULES = _module_files()


def _imports(module: str, path: Path) -> set[str]:
    """Absolute names of everything ``module`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            # "from shardline.trainer import dist" imports the sub-module dist
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)
    return out


IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}


def _in(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _violations(owner: str, forbidden: tuple[str, ...], allow: tuple[str, ...] = ()) -> list[str]:
    return sorted(f"{m} imports {i}" for m, imps in IMPORTS.items() if _in(m, owner)
                  for i in imps if _in(i, *forbidden) and not _in(i, *allow))


def test_every_mapped_folder_is_in_the_namespace() -> None:
    for name in MAPPED:
        assert (PKG / name / "__init__.py").is_file(), f"shardline/{name} does not reach {name}/"
        assert f"shardline.{name}" in MODULES


def test_the_core_imports_nothing_else_of_ours() -> None:
    others = tuple(f"shardline.{n}" for n in (*MAPPED, "cli", "api"))
    assert _violations("shardline.core", others) == []


def test_the_trainer_imports_no_orchestration_no_spark_and_no_ingest() -> None:
    forbidden = ("prefect", "pyspark", "great_expectations", "shardline.tasks",
                 "shardline.flows", "shardline.infra", "shardline.cli")
    assert _violations("shardline.trainer", forbidden) == []


def test_tasks_import_no_flows_and_infra_imports_no_stage() -> None:
    assert _violations("shardline.tasks", ("shardline.flows", "shardline.cli")) == []
    assert _violations("shardline.infra", ("shardline.flows", "shardline.tasks",
                                           "shardline.trainer", "shardline.cli")) == []


def test_flows_read_models_through_the_trainer_registry() -> None:
    """The model view is built from the trainer's registry reader
    (``shardline.trainer.registry_view``), not through the notebook API."""
    assert _violations("shardline.flows", ("shardline.api.models",)) == []


def test_stages_import_no_prefect() -> None:
    """Prefect glue (task wrappers, artifacts, credentials blocks) lives in shardline.flows;
    the stages run as plain functions (tests, benchmarks, a Spark executor)."""
    assert _violations("shardline.tasks", ("prefect", "prefect_aws")) == []


# Import cycles being removed by work in progress elsewhere; each entry is one pair of
# modules whose mutual imports are tolerated until that work lands (then delete it).
KNOWN_CYCLES: set[frozenset[str]] = set()


def _ours(module: str) -> set[str]:
    """What ``module`` imports of the project's own modules (packages count as their
    ``__init__``), leaving out the arrows of :data:`KNOWN_CYCLES`."""
    return {i for i in IMPORTS[module] if i in MODULES and i != module
            and frozenset({module, i}) not in KNOWN_CYCLES}


def _cycle_from(start: str) -> list[str] | None:
    """A shortest import path ``start -> ... -> start``, or None (breadth-first search)."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for m in frontier:
            for i in sorted(_ours(m)):
                if i == start:
                    path = [m]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if i not in came:
                    came[i] = m
                    nxt.append(i)
        frontier = nxt
    return None


def test_no_import_cycles() -> None:
    """Module-level and function-level imports alike: a function-level import that closes a
    circle only moves the failure from import time to call time."""
    cycles = {frozenset(c): c for m in MODULES if (c := _cycle_from(m)) is not None}
    shown = sorted(" -> ".join(c) for c in cycles.values())
    assert shown == [], f"import cycles among our modules: {shown}"


def test_nothing_imports_the_cli() -> None:
    outside = {m: i for m, i in IMPORTS.items() if not _in(m, "shardline.cli")}
    assert sorted(f"{m} imports {n}" for m, imps in outside.items() for n in imps
                  if _in(n, "shardline.cli")) == []
    bench = [p for p in (ROOT / "bench").glob("*.py") if "shardline.cli" in p.read_text()]
    assert bench == []


def test_only_the_bench_command_imports_the_benchmarks() -> None:
    """The benchmarks are an installed sub-package (``shardline.bench``) that one CLI module
    imports normally; nothing reaches them through ``sys.path``."""
    users = {m for m, imps in IMPORTS.items() if not _in(m, "shardline.bench")
             and any(_in(i, "shardline.bench", "bench") for i in imps)}
    assert users == {"shardline.cli.bench_cmd"}
    edits = sorted(m for m, p in MODULES.items()
                   if "sys.path.insert" in p.read_text() or "sys.path.append" in p.read_text())
    assert edits == []


def _private_uses(path: Path) -> list[str]:
    """``_name``s a module takes from our other modules: ``from shardline.x import _y`` or
    ``mod._y`` on a module it imported from ``shardline``."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shardline"):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{node.module}.{a.name}")
                elif f"{node.module}.{a.name}" in MODULES:
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names
                           if a.asname and a.name.startswith("shardline"))
    out += [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id in modules
            and n.attr.startswith("_") and not n.attr.startswith("__")]
    return out


def test_the_benchmarks_import_no_tests_and_no_private_names() -> None:
    assert _violations("shardline.bench", ("tests",)) == []
    private = {m: u for m, p in MODULES.items() if _in(m, "shardline.bench")
               and (u := _private_uses(p))}
    assert private == {}


def test_the_rules_see_imports() -> None:
    """The rules above would pass on an empty graph: check the reader finds real arrows."""
    assert "shardline.core.store" in IMPORTS["shardline.trainer.cache"]
    assert "shardline.core.errors" in IMPORTS["shardline.core.config"]
    assert len(MODULES) > 60


def test_the_private_name_rule_sees_both_forms(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from shardline.trainer.loop import _x, train_step\n"
                     "from shardline.core import receive as r\n"
                     "r._direct = None\nr.direct_response(None)\n")
    assert _private_uses(probe) == ["shardline.trainer.loop._x", "r._direct"]


@pytest.mark.timeout(120)
def test_importing_the_trainer_loads_no_prefect_or_spark() -> None:
    code = ("import json, sys, shardline.trainer.run, shardline.trainer.__main__; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True)
    loaded = set(json.loads(out.stdout))
    assert "torch" in loaded and "shardline.trainer.run" in loaded   # the probe itself worked
    tops = {m.split(".")[0] for m in loaded}
    assert not tops & {"prefect", "pyspark", "great_expectations"}
    assert not {m for m in loaded if _in(m, "shardline.tasks", "shardline.flows")}
