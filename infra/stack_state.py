"""Where a stack lives and what it runs: :class:`StackConfig` (resolved from arguments and
environment before ``up``) and :class:`StackState` (written to ``<home>/stack.json``)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardline.core.errors import ShardlineError
from shardline.infra.services import Service

DEFAULT_HOME = ".shardline"
DEFAULT_BUCKET = "shardline"
DEFAULT_PORTS = {"s3": 9310, "prefect": 4200, "spark": 15002}
STATE_FILE = "stack.json"
# moto accepts any credentials; these are the conventional ones.
ACCESS_KEY = SECRET_KEY = "testing"
REGION = "us-east-1"
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
DATABASES = ("postgres", "sqlite")
MAX_SPARK_WORKERS = 16


class StackError(ShardlineError):
    """The embedded stack cannot do what was asked; the message says what to do."""


class PortInUse(StackError):
    """A port the stack needs is taken by another process."""


def port_env(name: str) -> str:
    """Environment variable that sets the port of service ``name``."""
    return f"SHARDLINE_{name.upper()}_PORT"


def resolve_home(home: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> Path:
    """``home``, else ``SHARDLINE_HOME``, else ``./.shardline``; made absolute."""
    env = os.environ if env is None else env
    return Path(home or env.get("SHARDLINE_HOME") or DEFAULT_HOME).expanduser().resolve()


def _port(value: object, where: str) -> int:
    try:
        port = int(str(value))
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise StackError(f"{where} must be a TCP port number 1-65535, got {value!r}")
    return port


@dataclass(frozen=True)
class StackConfig:
    """What ``up`` starts: the home folder, one port per service, the default bucket,
    Prefect's database (``postgres``, the default, or ``sqlite``) and Spark's engine
    (``spark_workers`` = 0: ``spark_master``, local mode by default; N > 0: a standalone
    master and N workers on loopback that the Spark Connect server submits to)."""

    home: Path
    ports: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    bucket: str = DEFAULT_BUCKET
    spark_master: str = "local[2]"
    database: str = "postgres"
    db_port: int | None = None  # None: a free port, chosen by ``up``
    spark_workers: int = 0

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def prefect_home(self) -> Path:
        return self.home / "prefect"

    @property
    def snapshot_dir(self) -> Path:
        return self.home / "s3-snapshot"

    @property
    def db_root(self) -> Path:
        return self.home / "postgres"

    @classmethod
    def resolve(cls, home: str | os.PathLike[str] | None = None,
                ports: Mapping[str, int | None] | None = None, bucket: str | None = None,
                spark_master: str | None = None, database: str | None = None,
                spark_workers: int | None = None,
                env: Mapping[str, str] | None = None) -> StackConfig:
        """Arguments win over the environment (``SHARDLINE_HOME``, ``SHARDLINE_<NAME>_PORT``,
        ``SHARDLINE_BUCKET``, ``SHARDLINE_SPARK_MASTER``, ``SHARDLINE_PREFECT_DB``,
        ``SHARDLINE_POSTGRES_PORT``, ``SHARDLINE_SPARK_WORKERS``), which wins over the
        defaults.

        Raises:
            StackError: an unknown service name, a bad or repeated port, a bad bucket name,
                an unknown database, a bad worker count or a worker count with a master.
        """
        env = os.environ if env is None else env
        ports = dict(ports or {})
        unknown = sorted(set(ports) - set(DEFAULT_PORTS))
        if unknown:
            raise StackError(f"unknown service(s) {unknown}; known: {sorted(DEFAULT_PORTS)}")
        resolved: dict[str, int] = {}
        for name, default in DEFAULT_PORTS.items():
            if ports.get(name) is not None:
                resolved[name] = _port(ports[name], f"the {name} port")
            elif env.get(port_env(name)):
                resolved[name] = _port(env[port_env(name)], port_env(name))
            else:
                resolved[name] = default
        clash = {p for p in resolved.values() if list(resolved.values()).count(p) > 1}
        if clash:
            raise StackError(f"each service needs its own port, got {resolved}; "
                             "choose different ports")
        bucket = bucket or env.get("SHARDLINE_BUCKET") or DEFAULT_BUCKET
        if not _BUCKET_RE.match(bucket):
            raise StackError(f"bucket name {bucket!r} is not a valid S3 bucket name (3-63 "
                             "lowercase letters, digits, '.', '-'); set SHARDLINE_BUCKET")
        master = spark_master or env.get("SHARDLINE_SPARK_MASTER") or "local[2]"
        database = (database or env.get("SHARDLINE_PREFECT_DB") or "postgres").lower()
        if database not in DATABASES:
            raise StackError(f"Prefect database {database!r} is not one of {DATABASES}; set "
                             "SHARDLINE_PREFECT_DB to postgres (default) or sqlite")
        db_port = None
        if env.get("SHARDLINE_POSTGRES_PORT"):
            db_port = _port(env["SHARDLINE_POSTGRES_PORT"], "SHARDLINE_POSTGRES_PORT")
            if db_port in resolved.values():
                raise StackError(f"SHARDLINE_POSTGRES_PORT={db_port} is also the port of "
                                 f"another service ({resolved}); choose another")
        workers = _workers(spark_workers if spark_workers is not None
                           else env.get("SHARDLINE_SPARK_WORKERS", "0"))
        if workers and master != "local[2]":
            raise StackError(f"spark workers={workers} starts a standalone cluster, which "
                             f"replaces the Spark master {master!r}; set one or the other")
        return cls(resolve_home(home, env), resolved, bucket, master, database, db_port,
                   workers)


def _workers(value: object) -> int:
    try:
        n = int(str(value))
    except ValueError:
        n = -1
    if not 0 <= n <= MAX_SPARK_WORKERS:
        raise StackError(f"the number of Spark workers (SHARDLINE_SPARK_WORKERS or "
                         f"--spark-workers) must be 0 (local mode) to {MAX_SPARK_WORKERS}, "
                         f"got {value!r}")
    return n


@dataclass
class StackState:
    """A started stack, as recorded in ``<home>/stack.json``.

    ``phase`` is "starting" until the bucket snapshot is restored, then "up": ``down``
    never saves the buckets of a stack that did not finish starting (they may hold only
    part of the snapshot, which is still on disk).
    """

    home: str
    bucket: str
    started_at: str
    services: dict[str, Service]
    phase: str = "starting"
    restored: dict[str, Any] | None = None
    # Short-lived processes ``up`` started (the Spark warm-up job). Not services: they end
    # by themselves, so they never make a stack look half running; recorded by PID so that
    # ``down`` stops one that still runs.
    jobs: dict[str, Service] = field(default_factory=dict)

    @property
    def s3_endpoint(self) -> str:
        return self.services["s3"].url

    @property
    def prefect_ui_url(self) -> str:
        return self.services["prefect"].url

    @property
    def prefect_api_url(self) -> str:
        return f"{self.services['prefect'].url}/api"

    @property
    def spark_remote(self) -> str:
        return self.services["spark"].url

    @property
    def path(self) -> Path:
        return Path(self.home) / STATE_FILE

    def urls(self) -> dict[str, str]:
        return {"s3_endpoint": self.s3_endpoint, "prefect_api_url": self.prefect_api_url,
                "prefect_ui_url": self.prefect_ui_url, "spark_remote": self.spark_remote}

    def to_json(self) -> dict[str, Any]:
        return {"home": self.home, "bucket": self.bucket, "started_at": self.started_at,
                "phase": self.phase, "urls": self.urls(), "restored": self.restored,
                "services": {n: s.to_dict() for n, s in self.services.items()},
                "jobs": {n: s.to_dict() for n, s in self.jobs.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StackState:
        return cls(home=data["home"], bucket=data["bucket"], started_at=data["started_at"],
                   services={n: Service.from_dict(s) for n, s in data["services"].items()},
                   phase=data.get("phase", "up"), restored=data.get("restored"),
                   jobs={n: Service.from_dict(s) for n, s in data.get("jobs", {}).items()})

    def save(self) -> None:
        """Write ``stack.json`` atomically (a reader never sees half a file)."""
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(self.path)


def load_state(home: Path) -> StackState | None:
    """The recorded state under ``home`` (alive or not), or None when there is none.

    Raises:
        StackError: ``stack.json`` exists but cannot be read.
    """
    path = home / STATE_FILE
    if not path.exists():
        return None
    try:
        return StackState.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StackError(f"{path} cannot be read ({exc!r}); stop the processes it names by "
                         "hand if they still run, then delete it") from exc


def stack_env(state: StackState) -> dict[str, str]:
    """The environment a client process needs to use this stack (S3, Prefect, Spark)."""
    return {
        "SHARDLINE_S3_ENDPOINT_URL": state.s3_endpoint,
        "SHARDLINE_BUCKET": state.bucket,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "PREFECT_API_URL": state.prefect_api_url,
        "SHARDLINE_SPARK_REMOTE": state.spark_remote,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def running_stack(home: Path) -> StackState | None:
    """The stack under ``home`` if it finished starting and all its processes live."""
    state = load_state(home)
    if state is None or state.phase != "up":
        return None
    return state if all(s.alive() for s in state.services.values()) else None


def status(home: Path) -> dict[str, Any]:
    """What runs under ``home``, as JSON-able data: urls, bucket and, per service, pid,
    port, url, log, ``alive`` (process) and ``healthy`` (answers)."""
    state = load_state(home)
    if state is None:
        return {"home": str(home), "running": False, "services": {}}
    svcs = {
        name: {"pid": s.pid, "port": s.port, "url": s.url, "log": s.log, "alive": s.alive(),
               "healthy": s.healthy(), "ready_s": s.ready_s}
        for name, s in state.services.items()
    }
    return {
        "home": str(home), "running": state.phase == "up" and all(
            v["alive"] for v in svcs.values()),
        "phase": state.phase, "bucket": state.bucket, "started_at": state.started_at,
        **state.urls(), "services": svcs, "env": stack_env(state),
        "restored": state.restored, "snapshot_dir": str(Path(home) / "s3-snapshot"),
        "database": database_url(state),
    }


def database_url(state: StackState) -> str:
    """Where Prefect keeps its state: the PostgreSQL URL (no password) or the SQLite file."""
    db = state.services.get("postgres")
    if db is not None:
        return db.url
    return f"sqlite:///{Path(state.home) / 'prefect' / 'prefect.db'}"
