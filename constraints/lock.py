"""Write constraints/demo.txt: the exact versions installed in this venv for everything
``shardline[all,dev]`` needs (its dependency closure, extras and markers followed).

The Makefile installs with ``-c constraints/demo.txt``, so ``make demo`` / ``make test`` get
the versions that were tested, while the package itself declares ranges. Regenerate after a
tested upgrade: ``.venv/bin/python constraints/lock.py``.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT_EXTRAS = ("all", "dev")
OUT = Path(__file__).resolve().parent / "demo.txt"


def closure(root: str, extras: tuple[str, ...]) -> dict[str, str]:
    """``{name: version}`` for ``root[extras]`` and everything it needs, as installed."""
    pinned: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset(extras))]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), wanted)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue   # a dependency for another platform or Python (its marker was false)
        if canonicalize_name(name) != canonicalize_name(root):
            pinned[canonicalize_name(name)] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return pinned


def main() -> None:
    pins = closure("shardline", ROOT_EXTRAS)
    # A local build label (2.13.0+cpu) is this machine's wheel, not a PyPI release.
    lines = [f"{n}=={v.split('+')[0]}" for n, v in sorted(pins.items())]
    head = [f"# The tested lock for shardline[{','.join(ROOT_EXTRAS)}] on Python "
            f"{sys.version_info.major}.{sys.version_info.minor} (constraints/lock.py).",
            "# Used by the Makefile with `pip install -c`; the package itself declares ranges."]
    OUT.write_text("\n".join([*head, *lines]) + "\n")
    print(f"{OUT}: {len(lines)} pins")


if __name__ == "__main__":
    main()
