"""One function per embedded server: build its command line and environment, start it,
wait until it is healthy. The stack launcher and the test fixtures both use these.

Each server is started in two steps so several can boot at the same time: ``launch_*``
spawns the process and returns a :class:`Launch` at once; ``Launch.wait`` blocks until it
answers (and stops it if it does not). ``start_*`` does both, for a single server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardline.infra import procs
from shardline.resources import require_extra

BIN = Path(sys.executable).parent
# The caller's cloud credentials and profiles: no stack service needs them (the stack uses
# its own keys, given explicitly to the services that talk to its S3 server).
_CALLER_SECRETS = ("AWS_", "PREFECT_API_KEY")


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without its AWS_* settings and Prefect Cloud key, plus
    ``extra``: what every stack service starts from."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CALLER_SECRETS)}
    env.update(extra or {})
    return env


@dataclass
class Service:
    """A running server process: what to reach, how to check it and how to stop it."""

    name: str
    pid: int
    port: int | None
    url: str
    log: str
    health_url: str | None = None
    stop_signal: str = "SIGTERM"
    # /proc start time of ``pid``: a reused PID after a reboot is not mistaken for ours.
    started_ticks: int | None = None
    ready_s: float | None = None

    def alive(self) -> bool:
        """The process we started is still running (same PID and start time)."""
        if not procs.alive(self.pid):
            return False
        return self.started_ticks is None or procs.start_ticks(self.pid) == self.started_ticks

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """The server answers: its health URL below HTTP 500, or its port accepts."""
        if not self.alive():
            return False
        if self.health_url:
            return procs.http_ok(self.health_url, timeout_s)
        return self.port is None or procs.port_in_use(self.port)

    def stop(self, grace_s: float = 15.0) -> bool:
        """Stop the process group; True when it exited on the polite signal.

        Does nothing when the PID now belongs to another process (PID reuse).
        """
        if procs.alive(self.pid) and not self.alive():
            return True
        return procs.stop(self.pid, first=signal.Signals[self.stop_signal], grace_s=grace_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Service:
        return cls(**data)


@dataclass
class Launch:
    """A server process that was spawned and may not be ready yet."""

    service: Service
    proc: subprocess.Popen[bytes]
    ready: Callable[[], bool]  # one quick readiness check
    t0: float = field(default_factory=time.monotonic)

    def poll(self, timeout_s: float) -> bool:
        """True once the server answers.

        Raises:
            procs.StartError: it exited, or did not answer within ``timeout_s`` of its
                start; the message names the service and shows its log tail.
        """
        svc, log = self.service, Path(self.service.log)
        if self.proc.poll() is None and self.ready() and self.proc.poll() is None:
            svc.ready_s = round(time.monotonic() - self.t0, 2)
            return True
        if self.proc.poll() is not None:  # checked after ready(): a stranger may answer
            why = f"its process exited with code {self.proc.returncode}"
        elif time.monotonic() - self.t0 > timeout_s:
            why = f"it did not answer at {svc.url} within {timeout_s:.0f}s"
        else:
            return False
        raise procs.StartError(f"{svc.name} did not start: {why}; see {log}; log tail:\n"
                               f"{procs.log_tail(log)}")

    def wait(self, timeout_s: float) -> Service:
        """Block until the server answers; on failure (or Ctrl-C) stop it and re-raise."""
        try:
            wait_all([(self, timeout_s)])
        except BaseException:
            self.service.stop(grace_s=5.0)
            raise
        return self.service


def wait_all(launches: Sequence[tuple[Launch, float]], interval_s: float = 0.2) -> None:
    """Poll servers booting side by side until all answer; raise at the first failure
    (stopping them is the caller's choice)."""
    pending = list(launches)
    while pending:
        pending = [(launch, t) for launch, t in pending if not launch.poll(t)]
        if pending:
            time.sleep(interval_s)


def _spawn(
    name: str, cmd: list[str], log: Path, port: int, url: str, health_url: str | None,
    env: dict[str, str] | None = None, cwd: Path | None = None, stop_signal: str = "SIGTERM",
) -> tuple[Service, subprocess.Popen[bytes]]:
    proc = procs.start(cmd, log, env=base_env() if env is None else env, cwd=cwd)
    svc = Service(name, proc.pid, port, url, str(log), health_url, stop_signal,
                  procs.start_ticks(proc.pid))
    return svc, proc


def launch_moto(port: int, log_dir: Path, name: str = "s3") -> Launch:
    """The S3-compatible server (moto) on 127.0.0.1:port; objects live in its memory."""
    log = log_dir / "moto.log"
    url = f"http://127.0.0.1:{port}"
    health = f"{url}/moto-api/"
    require_extra("moto", "stack", "the embedded S3 server (moto[server])")
    cmd = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    svc, proc = _spawn(name, cmd, log, port, url, health)
    return Launch(svc, proc, lambda: procs.http_ok(health))


def start_moto(port: int, log_dir: Path, timeout_s: float = 30.0) -> Service:
    return launch_moto(port, log_dir).wait(timeout_s)


def sqlite_url(prefect_home: Path) -> str:
    return f"sqlite+aiosqlite:///{prefect_home}/prefect.db"


def prefect_env(port: int, prefect_home: Path, db_url: str | None = None) -> dict[str, str]:
    """Environment for a Prefect server on 127.0.0.1:port keeping its state in
    ``prefect_home`` (profiles, the UI bundle it copies on first start) and in ``db_url``
    (default: a SQLite file in ``prefect_home``)."""
    env = base_env()
    env.update(
        PREFECT_HOME=str(prefect_home),
        PREFECT_API_URL=f"http://127.0.0.1:{port}/api",
        PREFECT_API_DATABASE_CONNECTION_URL=db_url or sqlite_url(prefect_home),
        PREFECT_UI_STATIC_DIRECTORY=str(prefect_home / "ui"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # SQLite allows one writer: under bursts (hundreds of upload events while flow runs
        # write logs) requests wait for the lock instead of failing after 5-10 s.
        PREFECT_SERVER_DATABASE_TIMEOUT="60",
        PREFECT_SERVER_DATABASE_CONNECTION_TIMEOUT="60",
        # a run queued behind a deployment's concurrency limit (<dataset>-on-upload allows one
        # at a time) retries for the slot every 5 s, not every 30 (each retry is a worker
        # submission the server refuses: a burst's queued runs must not churn every second)
        PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS="5",
        DO_NOT_TRACK="1",
    )
    return env


def launch_prefect(port: int, prefect_home: Path, log_dir: Path,
                   name: str = "prefect", db_url: str | None = None) -> Launch:
    """``prefect server start`` on 127.0.0.1:port (API at /api, UI at /), its database at
    ``db_url`` (SQLite under ``prefect_home`` when None). It ignores SIGTERM, so it is
    stopped with SIGINT."""
    prefect_home.mkdir(parents=True, exist_ok=True)
    log = log_dir / "prefect.log"
    url = f"http://127.0.0.1:{port}"
    health = f"{url}/api/health"
    cmd = [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    env = prefect_env(port, prefect_home, db_url)
    svc, proc = _spawn(name, cmd, log, port, url, health, env=env, cwd=prefect_home,
                       stop_signal="SIGINT")
    return Launch(svc, proc, lambda: procs.http_ok(health))


def start_prefect(port: int, prefect_home: Path, log_dir: Path,
                  timeout_s: float = 90.0) -> Service:
    return launch_prefect(port, prefect_home, log_dir).wait(timeout_s)


def spark_env(log_dir: Path) -> dict[str, str]:
    """Environment for Spark processes: loopback only, the venv's Python for workers."""
    require_extra("pyspark", "ingest", "the embedded Spark Connect server")
    import pyspark  # the `ingest` extra: a reader's install has no Spark

    env = base_env()
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(log_dir),
        SPARK_PID_DIR=str(log_dir),
        # spark-daemon.sh then runs spark-submit in the foreground (no nohup, no pid file):
        # the JVM stays in our process group and dies with it.
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def launch_spark_connect(port: int, log_dir: Path, master: str = "local[2]",
                         work_dir: Path | None = None, name: str = "spark",
                         extra_conf: Sequence[str] = ()) -> Launch:
    """A Spark Connect server (``master``, local mode by default) on 127.0.0.1:port, run in
    the foreground of its own process group so it can be stopped by PID. ``work_dir`` is
    its current directory (spark-warehouse/, derby.log land there)."""
    log = log_dir / "spark-connect.log"
    env = spark_env(log_dir)
    script = Path(env["SPARK_HOME"]) / "sbin" / "start-connect-server.sh"
    cmd = [
        "bash", str(script), "--master", master,
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=2048",
        "--conf", "spark.python.worker.reuse=true",
        *extra_conf,
    ]
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    svc, proc = _spawn(name, cmd, log, port, f"sc://127.0.0.1:{port}", None, env=env,
                       cwd=work_dir)
    return Launch(svc, proc, lambda: procs.port_in_use(port))


def start_spark_connect(port: int, log_dir: Path, master: str = "local[2]",
                        timeout_s: float = 90.0) -> Service:
    return launch_spark_connect(port, log_dir, master).wait(timeout_s)
