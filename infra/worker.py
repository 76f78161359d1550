"""The stack's Prefect process workers: ``worker`` polls ``shardline-process`` (ingest),
``train-worker`` polls ``shardline-train`` (training), the pool names of compose and of
``shardline deploy``; both run the deployed flows as subprocesses on this machine (forked
from one warm server), with the stack's endpoints in their environment.

The worker gets no S3 keys: flow runs read them from the AwsCredentials block named in the
deployments (see ``tasks/settings.py``), as they would in production.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from shardline.infra import procs, services
from shardline.infra.stack_state import REGION, StackConfig
from shardline.resources import project_dir

POOL = "shardline-process"
TRAIN_POOL = "shardline-train"
# service name -> the pool its worker polls
WORKERS = {"worker": POOL, "train-worker": TRAIN_POOL}


def worker_env(cfg: StackConfig) -> dict[str, str]:
    env = services.base_env()  # none of the caller's AWS_* settings
    env.update(
        PREFECT_API_URL=f"http://127.0.0.1:{cfg.ports['prefect']}/api",
        PREFECT_HOME=str(cfg.home / "worker"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # a run due now waits for the next poll: half a second at most (one small query)
        PREFECT_WORKER_QUERY_SECONDS="0.5",
        PREFECT_WORKER_HEARTBEAT_SECONDS="5",
        SHARDLINE_HOME=str(cfg.home),
        SHARDLINE_S3_ENDPOINT_URL=f"http://127.0.0.1:{cfg.ports['s3']}",
        SHARDLINE_BUCKET=cfg.bucket,
        SHARDLINE_SPARK_REMOTE=f"sc://127.0.0.1:{cfg.ports['spark']}",
        AWS_DEFAULT_REGION=REGION,
        GX_ANALYTICS_ENABLED="false",
        # the deployments' command `python -m shardline.flows.warm` forks flow runs from the
        # warm server (already imported Prefect, torch, great-expectations): this venv's python
        PATH=os.pathsep.join([str(services.BIN), os.environ.get("PATH", "")]),
        SHARDLINE_WARM_SOCKET=str(warm_socket(cfg)),
    )
    return env


def warm_socket(cfg: StackConfig) -> Path:
    """The warm flow-run server's socket (``flows/warm.py``); unix socket paths are short."""
    path = cfg.home / "warm.sock"
    if len(str(path)) < 100:
        return path
    import hashlib

    return Path("/tmp") / f"shardline-warm-{hashlib.sha1(str(path).encode()).hexdigest()[:12]}.sock"


def launch_warm(cfg: StackConfig) -> services.Launch:
    """``python -m shardline.flows.warm serve``: imports the flows once, forks each run."""
    log = cfg.log_dir / "warm.log"
    env = worker_env(cfg)
    sock = warm_socket(cfg)
    sock.unlink(missing_ok=True)
    cmd = [str(services.BIN / "python"), "-m", "shardline.flows.warm", "serve", "--socket",
           str(sock)]
    proc = procs.start(cmd, log, env=env, cwd=project_dir())
    svc = services.Service("warm", proc.pid, None, f"unix:{sock}", str(log), None, "SIGTERM",
                           procs.start_ticks(proc.pid))
    return services.Launch(svc, proc, sock.exists)


def _registered(api_url: str, pool: str) -> bool:
    """The worker has announced itself to the server (its first heartbeat)."""
    req = urllib.request.Request(f"{api_url}/work_pools/{pool}/workers/filter", data=b"{}",
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return bool(json.loads(r.read()))
    except (OSError, ValueError):
        return False


def launch_worker(cfg: StackConfig, name: str = "worker") -> services.Launch:
    """The process worker ``name`` of :data:`WORKERS` (its pool is created on start)."""
    pool = WORKERS[name]
    log = cfg.log_dir / f"{name}.log"
    env = worker_env(cfg)
    if name != "worker":
        env["PREFECT_HOME"] = str(cfg.home / name)
        # a training run lasts minutes: a poll a second is plenty, and halves what this
        # second worker adds to the server's load (each poll also writes the queue's
        # last-polled time)
        env["PREFECT_WORKER_QUERY_SECONDS"] = "1"
    Path(env["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    api = env["PREFECT_API_URL"]
    cmd = [str(services.BIN / "prefect"), "worker", "start", "--pool", pool, "--type",
           "process", "--name", f"shardline-{name}-{cfg.ports['prefect']}"]
    proc = procs.start(cmd, log, env=env, cwd=project_dir())
    svc = services.Service(name, proc.pid, None, f"{api}/work_pools/{pool}", str(log),
                           None, "SIGINT", procs.start_ticks(proc.pid))
    return services.Launch(svc, proc, lambda: _registered(api, pool))
