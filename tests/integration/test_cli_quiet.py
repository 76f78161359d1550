"""No dependency noise in what the command line prints: no gRPC fork notices, no PySpark
pandas FutureWarning, no DeprecationWarnings. The CLI entry point quiets them
(``shardline.cli.common.quiet_dependencies``); library code installs no filters.

Real parts: a Spark Connect server (gRPC), moto S3, a Prefect server (test harness)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from shardline.infra.demo_data import digits, jsonl_bytes
from tests.integration.cli_helpers import write_config

NOISE = ("skipping fork() handlers", "fork_posix", "FutureWarning", "DeprecationWarning",
         "UserWarning", "warnings.warn", "absl::InitializeLog",
         "great_expectations.data_context")   # GX's "Created temporary directory" INFO

# A process that forks while Spark Connect calls are in flight on other threads: what
# makes gRPC core log its fork notice. With "cli" it first goes through the shardline
# entry point (``shardline --version``), as every command does.
DRIVER = """
import os, sys, threading
mode, remote = sys.argv[1], sys.argv[2]
if mode == "cli":
    from shardline.cli.main import app
    try:
        app(["--version"])
    except SystemExit:
        pass
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(remote).create()
stop = []
def busy():
    while not stop:
        spark.range(100).count()
threads = [threading.Thread(target=busy) for _ in range(2)]
for t in threads:
    t.start()
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
stop.append(1)
for t in threads:
    t.join()
spark.stop()
print("forked 20 times", flush=True)
"""


def bare_env(**extra: str) -> dict[str, str]:
    """The test's environment without anything that would quiet gRPC or warnings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GRPC_", "PYTHONWARNINGS", "PREFECT_API", "SHARDLINE_"))}
    return {**env, **extra}


def test_the_entry_point_quiets_grpc_fork_notices_and_pyspark_warnings(
        spark_remote: str, tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), mode, spark_remote],
                              env=bare_env(), cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)

    control = run("bare")   # the same work without the entry point: the noise is there
    assert control.returncode == 0 and "forked 20 times" in control.stdout, control.stderr
    assert "skipping fork() handlers" in control.stderr, control.stderr[-2000:]
    assert "FutureWarning" in control.stderr
    quiet = run("cli")
    assert quiet.returncode == 0 and "forked 20 times" in quiet.stdout, quiet.stderr
    assert quiet.stdout.startswith("shardline ")
    assert not [n for n in NOISE if n in quiet.stderr], quiet.stderr[-2000:]


def test_a_cli_ingest_prints_no_dependency_noise(prefect_harness, stack_env, store,
                                                spark_remote: str, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    cfg = write_config(tmp_path, "quietdigits", 0.2)
    store.put_bytes("incoming/quietdigits/a.jsonl", jsonl_bytes(digits(0, 40)))
    env = bare_env(SHARDLINE_SPARK_REMOTE=spark_remote,
                   SHARDLINE_HOME=str(tmp_path / "nostack"),
                   SHARDLINE_BUCKET=stack_env.bucket,
                   SHARDLINE_S3_ENDPOINT_URL=str(stack_env.endpoint_url),
                   PREFECT_API_URL=str(PREFECT_API_URL.value()))
    run = subprocess.run([str(Path(sys.executable).parent / "shardline"), "ingest", "-c",
                          str(cfg)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "published version 1" in run.stdout
    assert "Traceback" not in run.stderr
    # in a pipe: one plain line per stage on stdout, as it ends, none of Prefect's own
    stages = [line for line in run.stdout.splitlines() if ": " in line]
    assert stages[:4] == [s for s in stages if s.startswith(("detect:", "convert:", "validate:",
                                                             "publish:"))][:4], stages
    names = [s.split(":")[0] for s in stages]
    assert names.index("detect") < names.index("convert") < names.index("validate") \
        < names.index("publish"), stages
    assert any(s.startswith("detect: 1 new object (") for s in stages), stages
    assert any(re.match(r"convert: 40 rows in \d+ shards?, 0 quarantined", s)
               for s in stages), stages
    assert any(s.startswith("validate: passed: ") for s in stages), stages
    assert any(s.startswith("publish: published version 1: 40 rows") for s in stages), stages
    assert "Finished in state" not in run.stdout + run.stderr
    assert not [n for n in NOISE if n in run.stderr], run.stderr[-3000:]
