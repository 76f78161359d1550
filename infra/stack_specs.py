"""What the embedded stack runs: one :class:`ServiceSpec` per service, chosen by the
:class:`StackConfig` (PostgreSQL or SQLite for Prefect; Spark in local mode or a standalone
master with N workers). ``after`` names the services one needs; ``up`` starts each service
as soon as those answer, and ``down`` stops them in reverse order."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shardline.infra import postgres, procs, services, spark_cluster, worker
from shardline.infra.events import service as events_service
from shardline.infra.stack_state import DEFAULT_HOME, StackConfig, StackState

Started = Mapping[str, services.Service]


@dataclass(frozen=True)
class ServiceSpec:
    """How to start one service of the stack."""

    name: str
    # Spawns it; gets the config and the services of earlier waves (e.g. the database).
    launch: Callable[[StackConfig, Started], services.Launch]
    port_key: str | None = None  # its entry in StackConfig.ports, if it listens
    timeout_s: float = 120.0
    after: tuple[str, ...] = ()
    # Runs once the snapshot is restored (e.g. bucket notifications, which must not fire
    # for restored objects and which the snapshot does not keep).
    configure: Callable[[StackConfig, StackState], None] | None = None


def _database(c: StackConfig, started: Started) -> postgres.Database:
    port = started["postgres"].port if "postgres" in started else c.db_port
    return postgres.Database(c.db_root, port or procs.free_port())


def _launch_prefect(c: StackConfig, started: Started) -> services.Launch:
    url = _database(c, started).url() if c.database == "postgres" else None
    return services.launch_prefect(c.ports["prefect"], c.prefect_home, c.log_dir, db_url=url)


def _launch_spark(c: StackConfig, started: Started) -> services.Launch:
    if not c.spark_workers:
        return services.launch_spark_connect(c.ports["spark"], c.log_dir, c.spark_master,
                                             c.home / "spark")
    return services.launch_spark_connect(
        c.ports["spark"], c.log_dir, started["spark-master"].url, c.home / "spark",
        extra_conf=spark_cluster.connect_conf(c.spark_workers))


def _warm_spark(c: StackConfig, state: StackState) -> None:
    """Run one tiny job through the Connect server in the background (not waited for), so
    the first ingest does not pay Spark's first job (``flows/warm_spark.py``). Recorded in
    ``state.jobs`` by PID: ``down`` stops it if it still runs."""
    log = c.log_dir / "warm.log"
    url = state.services["spark"].url
    proc = procs.start([str(services.BIN / "python"), "-m", "shardline.flows.warm_spark", url],
                       log, env=services.base_env())
    state.jobs["spark-warmup"] = services.Service(
        "spark-warmup", proc.pid, None, url, str(log), None, "SIGTERM",
        procs.start_ticks(proc.pid))


def _worker_spec(i: int) -> ServiceSpec:
    return ServiceSpec(f"spark-worker-{i}", lambda c, s: spark_cluster.launch_worker(
        i, s["spark-master"], c.log_dir, c.home / "spark" / "cluster"), None, 90.0,
        after=("spark-master",))


def service_specs(cfg: StackConfig) -> tuple[ServiceSpec, ...]:
    """What ``up`` starts for ``cfg``: PostgreSQL only for ``database="postgres"``, a Spark
    master and workers only for ``spark_workers`` > 0."""
    db = ("postgres",) if cfg.database == "postgres" else ()
    workers = tuple(f"spark-worker-{i}" for i in range(1, cfg.spark_workers + 1))
    specs = [ServiceSpec("s3", lambda c, s: services.launch_moto(c.ports["s3"], c.log_dir),
                         "s3", 30.0)]
    if workers:
        specs.append(ServiceSpec("spark-master", lambda c, s: spark_cluster.launch_master(
            c.log_dir, c.home / "spark" / "cluster"), None, 90.0))
        specs.extend(_worker_spec(i) for i in range(1, cfg.spark_workers + 1))
    specs.append(ServiceSpec("spark", _launch_spark, "spark", after=workers,
                             configure=_warm_spark))
    if db:  # after Spark: its initdb runs while the JVMs boot
        specs.append(ServiceSpec("postgres", lambda c, s: postgres.launch_postgres(
            _database(c, s), c.log_dir), None, 60.0))
    specs += [
        ServiceSpec("prefect", _launch_prefect, "prefect", after=db),
        # imports the flows once (~5 s CPU) while the rest boots; stopped after the worker
        ServiceSpec("warm", lambda c, s: worker.launch_warm(c), None, 120.0),
        ServiceSpec("worker", lambda c, s: worker.launch_worker(c), None, 90.0,
                    after=("s3", "prefect", "spark", "warm")),
        ServiceSpec("train-worker", lambda c, s: worker.launch_worker(c, "train-worker"), None,
                    90.0, after=("s3", "prefect", "warm")),
        ServiceSpec(events_service.NAME, lambda c, s: events_service.launch(c), None, 30.0,
                    after=("s3", "prefect"), configure=events_service.configure),
    ]
    return tuple(specs)


# The default stack (PostgreSQL, Spark in local mode).
SERVICES: tuple[ServiceSpec, ...] = service_specs(StackConfig(Path(DEFAULT_HOME)))
