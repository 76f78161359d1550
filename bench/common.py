"""What every benchmark part shares: interleaved rounds and medians, rates of batch
iterators, peak memory, the machine and versions, results files and tables.

Method (the same in every part): each contender is measured once per *round*; the order
of contenders rotates from round to round, so a load spike from other work on the machine
hits different contenders in different rounds. A figure is the median over rounds, and a
comparison is the median of the per-round ratios (contender / reference measured in the
same round), which cancels slow drifts in machine load.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# The checkout (bench/ is linked into the package as shardline.bench), or, from an installed
# wheel, the folder the benchmark runs in: where results, data and the report go.
_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent if (_HERE.parent / "pyproject.toml").is_file() else Path.cwd()
# Tests point these elsewhere (the data is rebuilt when missing, results are overwritten).
RESULTS = Path(os.environ.get("SHARDLINE_BENCH_RESULTS") or ROOT / "bench" / "results")
DATA = Path(os.environ.get("SHARDLINE_BENCH_DATA") or ROOT / ".shardline" / "bench")
PACKAGES = ("torch", "torchdata", "numpy", "pyarrow", "pyspark", "pillow", "boto3", "moto",
            "great-expectations", "webdataset", "datasets")


# -- rounds and ratios ------------------------------------------------------------------
def interleaved(contenders: dict[str, Callable[[], float]], rounds: int,
                on_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Run every contender once per round, rotating the order; returns its values by name."""
    names = list(contenders)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            gc.collect()
            out[name].append(contenders[name]())
        if on_round is not None:
            on_round(r)
    return out


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def ratio(values: Sequence[float], reference: Sequence[float]) -> float:
    """Median of per-round ratios (both lists come from the same interleaved rounds)."""
    pairs = [a / b for a, b in zip(values, reference, strict=True) if b > 0]
    return median(pairs)


def rate(batches: Iterator[tuple[Any, Any]], *, warmup: int, seconds: float,
         min_batches: int = 3) -> float:
    """Samples/s of a batch iterator after ``warmup`` batches, timed for at least ``seconds``
    and ``min_batches``. A batch is (images, labels); the consumer does no work."""
    for _ in range(warmup):
        next(batches)
    n = k = 0
    t0 = time.perf_counter()
    while True:
        _, labels = next(batches)
        n += len(labels)
        k += 1
        elapsed = time.perf_counter() - t0
        if k >= min_batches and elapsed >= seconds:
            return n / elapsed


def cpu_rate(it: Iterator[tuple[Any, Any]], *, warmup: int, batches: int) -> float:
    """Samples per CPU second of this thread (``time.thread_time``) over ``batches``
    batches after ``warmup``."""
    for _ in range(warmup):
        next(it)
    n, t0 = 0, time.thread_time()
    for _ in range(batches):
        n += len(next(it)[1])
    return n / (time.thread_time() - t0)


@contextlib.contextmanager
def moto_bucket(prefix: str) -> Iterator[tuple[Path, Any, Any]]:
    """(scratch folder, moto server in it on a free port, ObjectStore on its bucket
    ``bench``); the server is stopped and the folder removed on exit."""
    from shardline.core.config import StoreSettings
    from shardline.core.store import ObjectStore
    from shardline.infra import procs, services

    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    moto = services.start_moto(procs.free_port(), scratch)
    try:
        store = ObjectStore(StoreSettings(bucket="bench", endpoint_url=moto.url,
                                          access_key="bench", secret_key="bench"))
        store.ensure_bucket()
        yield scratch, moto, store
    finally:
        moto.stop()
        shutil.rmtree(scratch, ignore_errors=True)


# -- memory -----------------------------------------------------------------------------
def _status(pid: int | str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.strip().endswith("kB"):
                out[key] = int(rest.split()[0]) * 1024
    except OSError:       # gone, or not ours to read
        pass
    return out


def rss(pid: int | str = "self") -> int:
    """Resident set size of process ``pid`` in bytes (0 once it is gone)."""
    return _status(pid).get("VmRSS", 0)


def _uss(pid: int) -> int:
    """Unique set size: the pages only this process holds (a forked worker's own memory;
    pages it still shares with its parent are the parent's)."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return total


def _children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return []
    return [int(k) for k in kids]


@dataclass
class PeakMemory:
    """Peak memory while the block runs, sampled every ``interval_s``: this process's
    growth in anonymous memory and in mapped file pages (page cache, shared and
    reclaimable), and the unique set size of its child processes (DataLoader workers: their
    own pages, not the ones they still share with this process after fork)."""

    interval_s: float = 0.01
    anon: int = 0
    file: int = 0
    children: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> PeakMemory:
        gc.collect()
        base = _status("self")
        self._base = (base.get("RssAnon", 0), base.get("RssFile", 0))
        self._older = set(_children(os.getpid()))      # servers we started: not counted
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        pid = os.getpid()
        while not self._stop.wait(self.interval_s):
            st = _status(pid)
            self.anon = max(self.anon, st.get("RssAnon", 0) - self._base[0])
            self.file = max(self.file, st.get("RssFile", 0) - self._base[1])
            kids = sum(_uss(c) for c in _children(pid) if c not in self._older)
            self.children = max(self.children, kids)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def to_dict(self) -> dict[str, float]:
        mb = 1 / 2**20
        return {"anon_mb": round(self.anon * mb, 1), "mapped_file_mb": round(self.file * mb, 1),
                "workers_mb": round(self.children * mb, 1)}


# -- the machine ------------------------------------------------------------------------
def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """Cores, memory, CPU model, GPU (if torch sees one), versions, commit, load."""
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = _meminfo().get("MemTotal", 0)
    gpu = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        gpu = {"name": p.name, "memory_gb": round(p.total_memory / 2**30, 1),
               "count": torch.cuda.device_count()}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, timeout=5,
                                capture_output=True, text=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)), "cpu": cpu,
        "memory_gb": round(mem / 2**30, 1), "gpu": gpu, "python": platform.python_version(),
        "kernel": platform.release(), "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "packages": {p: _version(p) for p in PACKAGES}, "commit": commit,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        out[key] = int(rest.split()[0]) * 1024
    return out


# -- results ----------------------------------------------------------------------------
def write_result(part: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{part}.json"
    path.write_text(json.dumps(result, indent=1, sort_keys=False, default=str) + "\n")
    return path


def bar(name: str, value: float, target: float, *, op: str = ">=",
        note: str = "") -> dict[str, Any]:
    """One acceptance bar: ``value op target`` with op one of >=, >, <=."""
    checks = {">=": value >= target, ">": value > target, "<=": value <= target}
    met: bool | None = checks[op]
    if value != value:  # NaN: not measured
        met = None
    return {"name": name, "value": round(value, 3), "target": target, "op": op, "met": met,
            "note": note}


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                stderr: bool = False) -> None:
    """A rich table (to stderr when stdout carries JSON)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*(fmt(v) for v in r))
    Console(stderr=stderr).print(table)


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "n/a"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return "" if v is None else str(v)
