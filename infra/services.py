"""One function per embedded server: build its command line and environment, start it,
wait until it is healthy. The stack launcher and the test fixtures both use these."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pyspark

from infra import procs

BIN = Path(sys.executable).parent


@dataclass
class Service:
    name: str
    pid: int
    port: int
    url: str
    log: str

    def stop(self) -> None:
        procs.stop(self.pid)


def start_moto(port: int, log_dir: Path, timeout_s: float = 30.0) -> Service:
    """The S3-compatible server (moto) on 127.0.0.1:port; objects live in its memory."""
    log = log_dir / "moto.log"
    proc = procs.start([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], log)
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_http(f"{url}/moto-api/", timeout_s, proc, log)
    except BaseException:
        procs.stop(proc.pid)
        raise
    return Service("s3", proc.pid, port, url, str(log))


def spark_env(log_dir: Path) -> dict[str, str]:
    """Environment for Spark processes: loopback only, the venv's Python for workers."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(Path(pyspark.__file__).parent),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(log_dir),
        SPARK_PID_DIR=str(log_dir),
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def start_spark_connect(port: int, log_dir: Path, master: str = "local[2]",
                        timeout_s: float = 90.0) -> Service:
    """A Spark Connect server (local mode) on 127.0.0.1:port, run in the foreground of its
    own process group so it can be stopped by PID."""
    log = log_dir / "spark-connect.log"
    env = spark_env(log_dir)
    script = Path(env["SPARK_HOME"]) / "sbin" / "start-connect-server.sh"
    cmd = [
        "bash", str(script), "--master", master,
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=2048",
        "--conf", "spark.python.worker.reuse=true",
    ]
    proc = procs.start(cmd, log, env=env)
    try:
        procs.wait_port(port, timeout_s, proc, log)
    except BaseException:
        procs.stop(proc.pid)
        raise
    return Service("spark-connect", proc.pid, port, f"sc://127.0.0.1:{port}", str(log))
