"""Where each second of upload -> training started goes: the points of one round's timeline,
read from the Prefect API (flow-run state history, task runs, events), and the CPU the
stack's processes used in each hop.

Points (Unix seconds, this machine's clock; Prefect records the same clock):

- ``put_start`` / ``uploaded``: the bench's PUT of the drop;
- ``event_occurred`` / ``event_received``: the ``s3.object.created`` event (the bridge sets
  ``occurred``; Prefect stamps ``received``);
- ``ingest_created``, ``ingest_due`` (the trigger's ``schedule_after``),
  ``ingest_pending`` (the worker took the run), ``ingest_running`` (the flow-run process
  reached the flow): the ingest run's state history;
- ``<task>_start`` / ``<task>_end`` for the ingest run's task runs (settle, detect,
  convert, validate, publish; load-versions and sweep come after the published event);
- ``version_published``: the ``shardline.dataset.published`` event's ``occurred`` (emitted
  right after the publish task, before the run's artifacts); ``version_doc`` is the
  document's own ``created_at`` (whole seconds: reported, not used for a hop);
- ``train_created`` / ``train_pending`` / ``train_running`` / ``train_finished``.

CPU: a sampler reads ``/proc`` every 0.2 s: the CPU seconds of every process under the
stack's services (flow-run processes included) and the machine's busy share. A hop's
``stack_cpu_s`` is what the stack used during it (on 2 cores at most 2x the wall time);
``busy`` is the share of the machine's CPU that anything (other work included) used.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime
from typing import Any

import httpx

# (label, from point, to point): consecutive hops from the PUT to training started.
HOPS: list[tuple[str, str, str]] = [
    ("upload (PUT of the drop)", "put_start", "uploaded"),
    ("S3 notification -> event received", "uploaded", "event_received"),
    ("trigger -> ingest run created", "event_received", "ingest_created"),
    ("worker poll (prefetch) -> run pending", "ingest_created", "ingest_pending"),
    ("process start + wait for due time -> running", "ingest_pending", "ingest_running"),
    ("settle (quiet-period check)", "ingest_running", "settle_end"),
    ("detect", "settle_end", "detect_end"),
    ("convert (Spark)", "detect_end", "convert_end"),
    ("validate (GX)", "convert_end", "validate_end"),
    ("publish (commit version doc)", "validate_end", "publish_end"),
    ("publish task end -> published event", "publish_end", "version_published"),
    ("trigger -> train run created", "version_published", "train_created"),
    ("worker poll -> train run pending", "train_created", "train_pending"),
    ("process start -> training started", "train_pending", "train_running"),
]
TOTALS: list[tuple[str, str, str]] = [
    ("upload done -> ingest running", "uploaded", "ingest_running"),
    ("upload done -> version published", "uploaded", "version_published"),
    ("upload done -> training started", "uploaded", "train_running"),
    ("training (1 epoch on CPU)", "train_running", "train_finished"),
]
TASKS = ("sweep", "settle", "detect", "convert", "validate", "publish", "load-versions")


def ts(value: str | None) -> float | None:
    return None if not value else datetime.fromisoformat(value).timestamp()


def state_times(api: str, flow_run_id: str) -> dict[str, float]:
    """The first time the run entered each state type (lower case), from its history."""
    states = httpx.get(f"{api}/flow_run_states/", params={"flow_run_id": flow_run_id},
                       timeout=30).json()
    out: dict[str, float] = {}
    for s in sorted(states, key=lambda s: s["timestamp"]):
        t = ts(s["timestamp"])
        if t is not None:
            out.setdefault(s["type"].lower(), t)
    return out


def task_points(api: str, flow_run_id: str) -> dict[str, float]:
    """First start and last end of each stage's task runs up to the publish that completed
    (a run goes on detecting after its version: those later task runs are not on the path
    to the version)."""
    body = {"flow_runs": {"id": {"any_": [flow_run_id]}}, "sort": "EXPECTED_START_TIME_ASC",
            "limit": 200}
    runs: list[tuple[str, float, float, str | None]] = []
    for tr in httpx.post(f"{api}/task_runs/filter", json=body, timeout=30).json():
        name = next((t for t in TASKS if tr["name"].startswith(t + "-")
                     or tr["name"] == t), None)
        start, end = ts(tr.get("start_time")), ts(tr.get("end_time"))
        if name is not None and start is not None and end is not None:
            runs.append((name, start, end, tr.get("state_type")))
    runs.sort(key=lambda r: r[1])
    anchor = next((end for name, _, end, state in runs
                   if name == "publish" and state == "COMPLETED"), float("inf"))
    out: dict[str, float] = {}
    for name, start, end, _ in runs:
        if start > anchor and name != "sweep":
            continue
        out.setdefault(f"{name}_start", start)   # the first attempt's start
        out[f"{name}_end"] = end                 # the last attempt's end
    return out


def run_points(api: str, prefix: str, run: dict[str, Any]) -> dict[str, float | None]:
    states = state_times(api, run["id"])
    return {f"{prefix}_created": ts(run["created"]),
            f"{prefix}_due": ts(run.get("expected_start_time")),
            f"{prefix}_pending": states.get("pending"),
            f"{prefix}_running": states.get("running") or ts(run.get("start_time")),
            f"{prefix}_finished": ts(run.get("end_time"))}


# -- CPU ------------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def _machine() -> tuple[float, float]:
    with open("/proc/stat") as f:
        parts = [float(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def _procs() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds: its own and its reaped children's)."""
    out: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2:].split()
        out[int(d)] = (int(fields[1]), sum(float(x) for x in fields[11:15]) / _TICK)
    return out


def tree_cpu(roots: set[int]) -> float:
    procs = _procs()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, [p for p in roots if p in procs], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += procs[pid][1]
        todo.extend(children.get(pid, []))
    return total


class CpuSampler(threading.Thread):
    """Samples (time, stack CPU s, machine busy ticks, machine ticks) every ``interval_s``."""

    def __init__(self, roots: set[int], interval_s: float = 0.2) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.roots, self.interval_s = roots, interval_s
        self.samples: list[tuple[float, float, float, float]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            busy, total = _machine()
            self.samples.append((time.time(), tree_cpu(self.roots), busy, total))
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()

    def _at(self, t: float) -> tuple[float, float, float, float] | None:
        before = [s for s in self.samples if s[0] <= t]
        return before[-1] if before else None

    def window(self, t0: float | None, t1: float | None) -> dict[str, float | None]:
        """Stack CPU seconds and the machine's busy share between two points (to the
        sampler's resolution)."""
        if t0 is None or t1 is None:
            return {"stack_cpu_s": None, "busy": None}
        a = self._at(t0)
        b = self._at(t1 + self.interval_s) or self._at(t1)
        if a is None or b is None or b[0] <= a[0]:
            return {"stack_cpu_s": None, "busy": None}
        ticks = b[3] - a[3]
        return {"stack_cpu_s": round(max(b[1] - a[1], 0.0), 2),
                "busy": round((b[2] - a[2]) / ticks, 2) if ticks > 0 else None}


def hops(points: dict[str, float | None], sampler: CpuSampler | None
         ) -> dict[str, dict[str, float | None]]:
    """Each hop (and total) of ``HOPS`` + ``TOTALS``: wall seconds, stack CPU, busy share."""
    out: dict[str, dict[str, float | None]] = {}
    for label, a, b in HOPS + TOTALS:
        start, end = points.get(a), points.get(b)
        wall = None if start is None or end is None else round(end - start, 3)
        cpu = sampler.window(start, end) if sampler else {"stack_cpu_s": None, "busy": None}
        out[label] = {"wall_s": wall, **cpu}
    return out


def loadavg() -> float:
    return os.getloadavg()[0]
