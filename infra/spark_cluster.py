"""A Spark standalone cluster on loopback: one master and N workers, each a plain JVM
process (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``, the
classes pyspark's ``sbin/start-master.sh`` and ``start-worker.sh`` run) in the foreground
of its own process group, stopped by PID like every other service of the stack.

The Spark Connect server is then started with ``--master spark://127.0.0.1:PORT``: it is the
cluster's driver, and every task (the conversion's ``mapInArrow`` functions) runs in an
executor JVM that a worker launched, with Python workers forked from ``PYSPARK_PYTHON``.

How the project's code reaches the executors: the Python functions that Spark Connect
ships are pickled by reference (``shardline.tasks.convert...``), so each executor's Python
must be able to import ``shardline``. Here the workers (and so the executors) run the
stack's own interpreter (``PYSPARK_PYTHON`` = this venv's python, where shardline is
installed); in production the executors run the project image (``infra/docker/``), which
installs the same wheel at the same version as the driver's image. Shipping code with the
Connect session (``spark.addArtifacts(...pyfile=True)``) is not used: it would still need
the project's third-party dependencies (pyarrow, xxhash, Pillow) on the executors.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from shardline.infra import procs
from shardline.infra.services import Launch, Service, spark_env

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
WORKER_CORES = 1
WORKER_MEMORY = "1g"


def _spark_class(env: dict[str, str]) -> str:
    return str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")


def cluster_json(ui_port: int) -> dict[str, Any] | None:
    """The master's view of the cluster (its web UI's /json/), None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            data: dict[str, Any] = json.loads(r.read())
            return data
    except (OSError, ValueError):
        return None


def alive_workers(ui_port: int) -> list[dict[str, Any]]:
    data = cluster_json(ui_port) or {}
    return [w for w in data.get("workers", []) if w.get("state") == "ALIVE"]


def launch_master(log_dir: Path, work_dir: Path, name: str = "spark-master") -> Launch:
    """The standalone master on 127.0.0.1 (free ports); ready when its UI's /json/ answers.
    Its Service ``url`` is ``spark://127.0.0.1:PORT``; ``health_url`` the /json/ URL."""
    port, ui_port = procs.free_port(), procs.free_port()
    env = spark_env(log_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "spark-master.log"
    cmd = [_spark_class(env), MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port),
           "--webui-port", str(ui_port)]
    proc = procs.start(cmd, log, env=env, cwd=work_dir)
    health = f"http://127.0.0.1:{ui_port}/json/"
    svc = Service(name, proc.pid, port, f"spark://127.0.0.1:{port}", str(log), health,
                  "SIGTERM", procs.start_ticks(proc.pid))
    return Launch(svc, proc, lambda: cluster_json(ui_port) is not None)


def launch_worker(index: int, master: Service, log_dir: Path, work_dir: Path,
                  cores: int = WORKER_CORES, memory: str = WORKER_MEMORY) -> Launch:
    """Worker ``index`` (1-based) of ``master``; ready once the master lists it ALIVE."""
    port, ui_port = procs.free_port(), procs.free_port()
    env = spark_env(log_dir)
    wdir = work_dir / f"worker-{index}"
    wdir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"spark-worker-{index}.log"
    cmd = [_spark_class(env), WORKER_CLASS, "--host", "127.0.0.1", "--port", str(port),
           "--webui-port", str(ui_port), "--cores", str(cores), "--memory", memory,
           "--work-dir", str(wdir), master.url]
    proc = procs.start(cmd, log, env=env, cwd=wdir)
    svc = Service(f"spark-worker-{index}", proc.pid, port, f"http://127.0.0.1:{ui_port}",
                  str(log), f"http://127.0.0.1:{ui_port}/", "SIGTERM",
                  procs.start_ticks(proc.pid))
    ui = int((master.health_url or "").rsplit(":", 1)[-1].split("/")[0])
    return Launch(svc, proc, lambda: any(w.get("port") == port for w in alive_workers(ui)))


def connect_conf(workers: int) -> list[str]:
    """Extra ``--conf`` arguments of the Connect server on a cluster: one executor of one
    core per worker, sized to fit the worker."""
    return ["--conf", f"spark.executor.cores={WORKER_CORES}",
            "--conf", f"spark.executor.memory={WORKER_MEMORY}",
            "--conf", f"spark.cores.max={workers * WORKER_CORES}"]
