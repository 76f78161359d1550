"""The embedded stack: an S3 server (moto), a Prefect server on PostgreSQL (or SQLite) and
a Spark Connect server (local mode, or the driver of a standalone master with N workers),
all on 127.0.0.1, started in the background and stopped by PID (see :mod:`infra.stack_specs`
for what runs under which settings).

Everything lives under one home folder (``SHARDLINE_HOME``, default ``./.shardline``)::

    stack.json     what runs: pids, ports, urls, bucket, started_at (see StackState)
    stack.lock     held while up/down run, so two of them never race on one home
    logs/          one log per server, appended across restarts
    prefect/       PREFECT_HOME: the UI bundle (and prefect.db with SHARDLINE_PREFECT_DB=sqlite)
    postgres/      PostgreSQL's data/ and the password file (see :mod:`infra.postgres`)
    spark/         the Spark server's working folder (spark-warehouse/)
    s3-snapshot/   every bucket, saved by ``down`` and loaded by ``up``

Two stacks with different homes and ports run side by side.

What survives ``down`` / ``up``: moto keeps objects only in memory, so ``down`` first saves
every bucket to ``<home>/s3-snapshot/<bucket>/<key>`` (see :mod:`infra.snapshot`; ETags,
content types and user metadata are kept) and only then stops the servers; if saving fails
nothing is stopped. ``up`` loads the snapshot back and reports the counts; the snapshot
stays on disk until the next ``down`` replaces it. ``down --discard`` skips saving: the
objects written since ``up`` are dropped and the next ``up`` loads the older snapshot
again. Prefect state (flow runs, deployments, artifacts) is in PostgreSQL under
``postgres/`` (or SQLite under ``prefect/``) and survives by itself. A crash, ``kill -9``
or reboot of the S3 server loses what was written since the last ``up``.

Adding a service (a Prefect worker, an SQS consumer) is one more :class:`ServiceSpec` in
:func:`service_specs`; ``after`` names the services it needs, which are started and healthy
first; every service starts as soon as its own needs answer. ``down`` stops them in
reverse order.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra import procs, services, snapshot
from shardline.infra.stack_specs import SERVICES, ServiceSpec, service_specs
from shardline.infra.stack_state import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    PortInUse,
    StackConfig,
    StackError,
    StackState,
    load_state,
    port_env,
    running_stack,
    stack_env,
    status,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpResult:
    state: StackState
    already_running: bool = False
    restored: snapshot.SnapshotSummary | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class DownResult:
    was_running: bool
    snapshot: snapshot.SnapshotSummary | None = None
    stop_seconds: dict[str, float] = field(default_factory=dict)
    killed: list[str] = field(default_factory=list)  # needed SIGKILL
    notes: list[str] = field(default_factory=list)


def _waves(specs: tuple[ServiceSpec, ...]) -> list[list[ServiceSpec]]:
    """Specs grouped so each group only needs services of earlier groups."""
    done: set[str] = set()
    left = list(specs)
    waves = []
    while left:
        wave = [s for s in left if set(s.after) <= done]
        if not wave:
            raise StackError(f"services {[s.name for s in left]} wait for each other or for "
                             f"unknown services; check their 'after' lists")
        waves.append(wave)
        done |= {s.name for s in wave}
        left = [s for s in left if s not in wave]
    return waves


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "stack.lock"
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise StackError(f"another `shardline up/down` is running for {home} (it holds "
                             f"{path}); wait for it to finish") from exc
        yield


def _check_ports(cfg: StackConfig) -> None:
    for spec in service_specs(cfg):
        if spec.port_key is None:
            continue
        port = cfg.ports[spec.port_key]
        if not procs.port_free(port):
            raise PortInUse(
                f"port {port} for {spec.name} on 127.0.0.1 is already in use; stop what "
                f"listens there (`ss -ltnp 'sport = :{port}'` shows it) or choose another "
                f"port with --{spec.port_key}-port or {port_env(spec.port_key)}")


def _stop_one(svc: services.Service, grace_s: float) -> tuple[str, bool, float]:
    t = time.monotonic()
    polite = svc.stop(grace_s)
    return svc.name, polite, round(time.monotonic() - t, 2)


def _stop_all(svcs: list[services.Service],
              grace_s: float = 15.0) -> list[tuple[str, bool, float]]:
    """Stop services concurrently: (name, exited on the polite signal, seconds) each."""
    if not svcs:
        return []
    with ThreadPoolExecutor(max_workers=len(svcs)) as pool:
        return list(pool.map(lambda s: _stop_one(s, grace_s), svcs))


def _start_all(cfg: StackConfig, interval_s: float = 0.2) -> dict[str, services.Service]:
    """Start every service as soon as the services it needs answer (a service never waits
    for an unrelated slow one); on any failure stop those already started."""
    specs = service_specs(cfg)
    _waves(specs)  # refuses cycles and unknown names before anything starts
    started: dict[str, services.Service] = {}
    ready: set[str] = set()
    pending: list[tuple[ServiceSpec, services.Launch]] = []
    try:
        while len(ready) < len(specs):
            for spec in specs:
                if spec.name not in started and set(spec.after) <= ready:
                    launch = spec.launch(cfg, {n: started[n] for n in ready})
                    started[spec.name] = launch.service
                    pending.append((spec, launch))
            try:
                now_ready = [(s, la) for s, la in pending if la.poll(s.timeout_s)]
            except procs.StartError as exc:
                raise StackError(f"{exc}\nstopped everything this `up` started: "
                                 f"{', '.join(started)}") from exc
            for spec, launch in now_ready:
                ready.add(spec.name)
                pending.remove((spec, launch))
                log.info("%s ready in %.1fs: %s", spec.name, launch.service.ready_s,
                         launch.service.url)
            if not now_ready:
                time.sleep(interval_s)
    except BaseException:
        _stop_all(list(started.values()), grace_s=5.0)
        raise
    return started


def _restore(cfg: StackConfig, state: StackState) -> snapshot.SnapshotSummary | None:
    client = snapshot.s3_client(state.s3_endpoint, ACCESS_KEY, SECRET_KEY, REGION)
    restored = snapshot.restore_snapshot(client, cfg.snapshot_dir)
    ObjectStore(StoreSettings(bucket=cfg.bucket, endpoint_url=state.s3_endpoint,
                              access_key=ACCESS_KEY, secret_key=SECRET_KEY,
                              region=REGION)).ensure_bucket()
    return restored


def up(cfg: StackConfig) -> UpResult:
    """Start the stack under ``cfg.home``, load the bucket snapshot, create the bucket.

    Does nothing (``already_running``) when it is up already.

    Raises:
        PortInUse: a port is taken; nothing was started.
        StackError: a service did not start, or the snapshot could not be loaded; every
            service that was started has been stopped again.
    """
    t0 = time.monotonic()
    with _locked(cfg.home):
        current = load_state(cfg.home)
        if current is not None:
            live = [n for n, s in current.services.items() if s.alive()]
            if current.phase == "up" and len(live) == len(current.services):
                return UpResult(current, already_running=True)
            if live:
                raise StackError(
                    f"the stack in {cfg.home} is half running ({', '.join(live)} alive, phase "
                    f"{current.phase}); run `shardline down --home {cfg.home}` first")
            log.info("removing stale %s (its processes are gone)", current.path)
            current.path.unlink()
        _check_ports(cfg)
        started = _start_all(cfg)
        state = StackState(str(cfg.home), cfg.bucket,
                           datetime.now(UTC).isoformat(timespec="seconds"), started)
        try:
            state.save()
            restored = _restore(cfg, state)
            for spec in service_specs(cfg):
                if spec.configure is not None:
                    spec.configure(cfg, state)
            state.phase = "up"
            state.restored = None if restored is None else {
                "objects": restored.objects, "bytes": restored.bytes,
                "taken_at": restored.taken_at, "etag_changed": len(restored.etag_changed)}
            state.save()
        except BaseException:
            _stop_all([*state.jobs.values(), *started.values()], grace_s=5.0)
            state.path.unlink(missing_ok=True)
            raise
        return UpResult(state, restored=restored, seconds=round(time.monotonic() - t0, 2))


def _stop_groups(state: StackState) -> list[list[services.Service]]:
    """The recorded services in start order, by wave; names this version does not know
    (a state file from another version) come last, so they are stopped first."""
    names = state.services
    waves = _waves(service_specs(StackConfig(
        Path(state.home), database="postgres" if "postgres" in names else "sqlite",
        spark_workers=sum(n.startswith("spark-worker-") for n in names))))
    known = {spec.name for wave in waves for spec in wave}
    groups = [[state.services[s.name] for s in wave if s.name in state.services]
              for wave in waves]
    groups.append([s for n, s in state.services.items() if n not in known])
    return groups


def down(home: Path, discard: bool = False) -> DownResult:
    """Save every bucket to ``<home>/s3-snapshot`` (unless ``discard``), then stop every
    service, in reverse start order.

    Raises:
        snapshot.SnapshotError: saving failed; nothing was stopped. Fix the cause and run
            down again, or pass ``discard=True`` to drop the objects.
    """
    with _locked(home):
        state = load_state(home)
        if state is None:
            return DownResult(was_running=False)
        notes: list[str] = []
        saved = None
        s3 = state.services.get("s3")
        if discard:
            notes.append("objects were not saved (--discard)")
        elif state.phase != "up":
            notes.append("the stack had not finished starting: objects were not saved; "
                         "the previous snapshot is kept")
        elif s3 is None or not s3.alive():
            notes.append("the S3 server was not running: nothing to save; objects written "
                         "since the last up are lost; the previous snapshot is kept")
        else:
            client = snapshot.s3_client(s3.url, ACCESS_KEY, SECRET_KEY, REGION)
            try:
                saved = snapshot.take_snapshot(client, Path(home) / "s3-snapshot")
            except snapshot.SnapshotError as exc:
                raise snapshot.SnapshotError(
                    f"{exc}\nnothing was stopped; fix the cause and run `shardline down` "
                    "again, or `shardline down --discard` to drop the objects") from exc
        times: dict[str, float] = {}
        killed: list[str] = []
        for group in [list(state.jobs.values()), *reversed(_stop_groups(state))]:
            for name, polite, seconds in _stop_all(group):
                times[name] = seconds
                if not polite:
                    killed.append(name)
        state.path.unlink(missing_ok=True)
        return DownResult(True, saved, times, killed, notes)


__all__ = ["SERVICES", "DownResult", "PortInUse", "ServiceSpec", "StackConfig", "StackError",
           "StackState", "UpResult", "down", "load_state", "running_stack", "service_specs",
           "stack_env", "status", "up"]
