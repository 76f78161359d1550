"""The embedded stack with its real servers (moto, Prefect, Spark Connect) on free ports.

One stack ("A") is shared by the module; tests that restart it leave it up again. Every
stack a test starts is registered with ``stacks`` and stopped at teardown, also when the
test fails, and every PID it ever had is checked (and killed) at the end.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import typer
from typer.testing import CliRunner

from shardline.cli import stack_cmds
from shardline.core.errors import ShardlineError
from shardline.infra import procs, stack
from shardline.infra.stack_state import StackConfig, StackError, load_state, stack_env
from tests.integration.stack_helpers import process_args

pytestmark = pytest.mark.timeout(300)
SERVICES = ("s3", "prefect", "spark")


def free_ports(n: int = 3) -> list[int]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(procs.free_port())
    return sorted(ports)


def config(home: Path, spark_master: str | None = None) -> StackConfig:
    """A stack on fresh free ports, ignoring the caller's SHARDLINE_* environment."""
    ports = dict(zip(SERVICES, free_ports(), strict=True))
    return StackConfig.resolve(home, ports, spark_master=spark_master, env={})


def processes_using(ports: list[int]) -> list[int]:
    """PIDs whose command line names one of ``ports`` (moto -p P, --port P, ...=P)."""
    wanted = {str(p) for p in ports}
    return [pid for pid, args in process_args()
            if any(a in wanted or a.rsplit("=", 1)[-1] in wanted for a in args)]


def gone(pid: int) -> bool:
    """Neither the process nor anything of its process group (the Spark JVM) runs."""
    return not procs.alive(pid) and not procs.group_members(pid)


def s3(state: stack.StackState) -> Any:
    env = stack_env(state)
    return boto3.client("s3", endpoint_url=env["SHARDLINE_S3_ENDPOINT_URL"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        region_name=env["AWS_DEFAULT_REGION"])


class Stacks:
    """Every stack the tests start; :meth:`close` stops them all, whatever happened."""

    def __init__(self) -> None:
        self.homes: list[Path] = []
        self.pids: set[int] = set()

    def track(self, home: Path) -> None:
        if home not in self.homes:
            self.homes.append(home)
        state = load_state(home)
        if state is not None:
            self.pids |= {s.pid for s in state.services.values()}

    def up(self, cfg: StackConfig) -> stack.UpResult:
        try:
            return stack.up(cfg)
        finally:
            self.track(cfg.home)

    def close(self) -> list[int]:
        for home in self.homes:
            try:
                stack.down(home, discard=True)
            except ShardlineError as exc:  # keep going: the PIDs are stopped below
                print(f"teardown: down {home} failed: {exc}")
        leftovers = [p for p in self.pids if not gone(p)]
        for pid in leftovers:
            procs.stop(pid, grace_s=5.0)
        return leftovers


@pytest.fixture(scope="module")
def stacks() -> Iterator[Stacks]:
    tracked = Stacks()
    try:
        yield tracked
    finally:
        leftovers = tracked.close()
    assert not leftovers, f"processes outlived `down`: {leftovers}"


# The caller's cloud secrets: no stack process may see them (the stack has its own keys).
CANARIES = {"AWS_ACCESS_KEY_ID": "AKIACANARY0000000001", "AWS_SECRET_ACCESS_KEY": "canary-secret",
            "AWS_SESSION_TOKEN": "canary-token", "AWS_PROFILE": "canary-profile",
            "PREFECT_API_KEY": "pnu_canary"}


@pytest.fixture(scope="module")
def stack_a(stacks: Stacks, tmp_path_factory: pytest.TempPathFactory) -> StackConfig:
    cfg = config(tmp_path_factory.mktemp("stack-a"))
    aws = tmp_path_factory.mktemp("aws") / "credentials"  # a real profile of the caller's
    aws.write_text("[canary-profile]\naws_access_key_id = AKIACANARY0000000002\n"
                   "aws_secret_access_key = canary-file-secret\n")
    with pytest.MonkeyPatch.context() as env:
        for k, v in CANARIES.items():
            env.setenv(k, v)
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(aws))
        result = stacks.up(cfg)
    assert not result.already_running and result.restored is None
    return cfg


@pytest.fixture(scope="module")
def cli() -> typer.Typer:
    app = typer.Typer()
    stack_cmds.register(app)
    return app


def test_status_reports_every_service_alive(stack_a: StackConfig, cli: typer.Typer) -> None:
    st = stack.status(stack_a.home)
    assert st["running"] and st["bucket"] == "shardline"
    for name in SERVICES:
        svc = st["services"][name]
        assert svc["alive"] and svc["healthy"], (name, svc)
        assert svc["port"] == stack_a.ports[name] and Path(svc["log"]).is_file()
    # a worker per pool (ingest: shardline-process, training: shardline-train); this stack
    # was started without deploying: status lists no dataset (test_second_stack_... one)
    assert st["services"]["worker"]["alive"] and st["services"]["train-worker"]["alive"]
    run = CliRunner().invoke(cli, ["status", "--json", "--home", str(stack_a.home)])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["datasets"] == {}
    saved = json.loads((stack_a.home / "stack.json").read_text())
    assert {"started_at", "bucket", "urls", "services"} <= set(saved)
    state = stack.running_stack(stack_a.home)
    assert state is not None
    env = stack_env(state)
    assert env["PREFECT_API_URL"] == f"http://127.0.0.1:{stack_a.ports['prefect']}/api"
    assert env["SHARDLINE_SPARK_REMOTE"] == f"sc://127.0.0.1:{stack_a.ports['spark']}"
    assert env["SHARDLINE_S3_ENDPOINT_URL"] == f"http://127.0.0.1:{stack_a.ports['s3']}"
    # Prefect runs on the stack's PostgreSQL (data under the home folder, loopback only, a
    # password not shown in the status); its UI bundle is under the home folder too.
    db = st["services"]["postgres"]
    assert db["alive"] and db["healthy"] and Path(db["log"]).is_file()
    assert st["database"] == f"postgresql://shardline@127.0.0.1:{db['port']}/prefect"
    assert (stack_a.db_root / "data" / "PG_VERSION").is_file()
    assert not (stack_a.prefect_home / "prefect.db").exists()
    assert (stack_a.prefect_home / "ui").is_dir()
    password = (stack_a.db_root / "password").read_text().strip()
    assert password not in json.dumps(st)
    import asyncio

    import asyncpg

    async def tables(pw: str) -> list[str]:
        conn = await asyncpg.connect(host="127.0.0.1", port=db["port"], user="shardline",
                                     password=pw, database="prefect")
        try:
            rows = await conn.fetch("select tablename from pg_tables where tablename = "
                                    "'flow_run'")
            return [r["tablename"] for r in rows]
        finally:
            await conn.close()

    assert asyncio.run(tables(password)) == ["flow_run"]  # Prefect's schema is there
    with pytest.raises(asyncpg.InvalidPasswordError):
        asyncio.run(tables("wrong"))
    # The bucket exists and Spark Connect runs jobs.
    s3(state).head_bucket(Bucket="shardline")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(state.spark_remote).getOrCreate()
    try:
        assert spark.range(10).count() == 10
    finally:
        spark.stop()


def test_no_service_sees_the_callers_cloud_secrets(stack_a: StackConfig) -> None:
    """Every process of every service (JVMs, postgres backends, Python workers included)."""
    state = stack.running_stack(stack_a.home)
    assert state is not None
    seen = 0
    for name, svc in state.services.items():
        for pid in {svc.pid, *procs.group_members(svc.pid)}:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except OSError:
                continue  # exited meanwhile
            seen += 1
            leaked = [k for k, v in CANARIES.items() if v in environ]
            leaked += ["AWS_SHARED_CREDENTIALS_FILE"] * ("AWS_SHARED_CREDENTIALS_FILE" in environ)
            assert not leaked, f"{name} (pid {pid}) has the caller's {leaked}"
    assert seen >= len(state.services)


def test_up_when_up_changes_nothing(stack_a: StackConfig, cli: typer.Typer) -> None:
    before = (stack_a.home / "stack.json").read_text()
    again = stack.up(stack_a)
    assert again.already_running
    assert (stack_a.home / "stack.json").read_text() == before
    run = CliRunner().invoke(cli, ["up", "--home", str(stack_a.home)])
    assert run.exit_code == 0 and "already up" in run.output, run.output
    run = CliRunner().invoke(cli, ["status", "--json", "--home", str(stack_a.home)])
    assert run.exit_code == 0, run.output
    st = json.loads(run.stdout)
    assert st["running"] and all(s["alive"] for s in st["services"].values())
    assert (stack_a.home / "stack.json").read_text() == before


def test_occupied_port_is_a_clear_error(tmp_path: Path, cli: typer.Typer) -> None:
    cfg = config(tmp_path / "busy")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", cfg.ports["prefect"]))
        taken.listen()
        with pytest.raises(stack.PortInUse, match=rf"port {cfg.ports['prefect']} for prefect"
                                                  r".*--prefect-port"):
            stack.up(cfg)
        run = CliRunner().invoke(cli, [
            "up", "--home", str(cfg.home), "--s3-port", str(cfg.ports["s3"]),
            "--prefect-port", str(cfg.ports["prefect"]), "--spark-port", str(cfg.ports["spark"])])
    assert run.exit_code == 1 and str(cfg.ports["prefect"]) in run.output, run.output
    assert not (cfg.home / "stack.json").exists()
    assert processes_using(list(cfg.ports.values())) == []


def processes_under(home: Path) -> list[int]:
    """PIDs whose command line names a path under ``home`` (postgres -D, Spark work dirs)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            args = (d / "cmdline").read_bytes().decode(errors="replace") if d.name.isdigit() \
                else ""
        except OSError:
            continue
        if str(home) in args:
            found.append(int(d.name))
    return found


def test_failed_service_stops_the_others(tmp_path: Path, stacks: Stacks) -> None:
    cfg = config(tmp_path / "broken", spark_master="bogus://nowhere")
    with pytest.raises(StackError, match=r"(?s)spark did not start.*Master must"):
        stacks.up(cfg)
    assert not (cfg.home / "stack.json").exists()
    assert processes_using(list(cfg.ports.values())) == []
    assert processes_under(cfg.home) == []  # the database too
    assert all(procs.port_free(p) for p in cfg.ports.values())


def _deployments_name_no_host_path_and_run(state: stack.StackState) -> None:
    """`up` deployed the flows from prefect.yaml: module entrypoints, no pull step, so no
    folder of this machine in a deployment, the config parameter included (an s3:// URI of
    the TOML that deploy uploaded); and the worker runs one from the installed package."""
    import time

    import httpx

    project = str(Path(stack.__file__).resolve().parents[1])
    api = state.prefect_api_url
    deps = httpx.post(f"{api}/deployments/filter", json={}, timeout=30).json()
    assert sorted(d["name"] for d in deps) == [
        "digits-nightly", "digits-on-publish", "digits-on-upload"]   # named for the dataset
    for d in deps:
        assert d["entrypoint"] in ("shardline.flows.ingest:ingest", "shardline.flows.train:train")
        assert d["pull_steps"] == [] and not d["path"], d["name"]
        assert project not in json.dumps(d), d["name"]
        if d["name"] != "digits-on-publish":   # train's config comes from the event
            assert d["parameters"]["config"].startswith("s3://"), d["parameters"]
    nightly = next(d for d in deps if d["name"] == "digits-nightly")
    run = httpx.post(f"{api}/deployments/{nightly['id']}/create_flow_run", json={},
                     timeout=30).json()
    deadline, state_type = time.monotonic() + 240, None
    while time.monotonic() < deadline:
        state_type = httpx.get(f"{api}/flow_runs/{run['id']}", timeout=30).json()["state"]["type"]
        if state_type in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            break
        time.sleep(1)
    assert state_type == "COMPLETED", state_type  # nothing new: the flow ran and returned
    # forked from the warm flow-run server (flows/warm.py), not started cold
    assert all(d["job_variables"]["command"] == "python -m shardline.flows.warm" for d in deps)
    assert f"flow run {run['id']}: forked pid" in (Path(state.home) / "logs" / "warm.log"
                                                   ).read_text()


@pytest.mark.slow
def test_second_stack_runs_beside_the_first(stack_a: StackConfig, stacks: Stacks,
                                            tmp_path: Path, cli: typer.Typer) -> None:
    home_b = tmp_path / "stack-b"
    ports = free_ports()
    stacks.homes.append(home_b)
    # Stack B keeps Prefect on SQLite (the explicit option).
    run = CliRunner().invoke(cli, [
        "up", "--home", str(home_b), "--bucket", "other-bucket",
        *(arg for name, port in zip(SERVICES, ports, strict=True)
          for arg in (f"--{name}-port", str(port)))], env={"SHARDLINE_PREFECT_DB": "sqlite"})
    stacks.track(home_b)
    assert run.exit_code == 0, run.output
    st_b = stack.status(home_b)
    assert "postgres" not in st_b["services"] and not (home_b / "postgres").exists()
    assert st_b["database"] == f"sqlite:///{home_b / 'prefect' / 'prefect.db'}"
    assert (home_b / "prefect" / "prefect.db").is_file()
    assert "Prefect DB" in run.output and "sqlite:///" in run.output
    state_a, state_b = stack.running_stack(stack_a.home), stack.running_stack(home_b)
    assert state_a is not None and state_b is not None
    assert {s.pid for s in state_a.services.values()}.isdisjoint(
        s.pid for s in state_b.services.values())
    _deployments_name_no_host_path_and_run(state_b)
    run = CliRunner().invoke(cli, ["status", "--json", "--home", str(home_b)])
    assert run.exit_code == 0, run.output
    assert [(d["name"], d["work_pool"]) for d in json.loads(run.output)["datasets"]["digits"]
            ] == [("ingest/digits-nightly", "shardline-process"),
                  ("ingest/digits-on-upload", "shardline-process"),
                  ("train/digits-on-publish", "shardline-train")]
    s3(state_b).put_object(Bucket="other-bucket", Key="only-in-b", Body=b"b")
    names_a = [b["Name"] for b in s3(state_a).list_buckets()["Buckets"]]
    assert "other-bucket" not in names_a
    run = CliRunner().invoke(cli, ["down", "--discard", "--home", str(home_b)])
    assert run.exit_code == 0 and "not saved" in run.output, run.output
    assert not (home_b / "s3-snapshot").exists()
    assert all(gone(s.pid) for s in state_b.services.values())
    assert stack.running_stack(stack_a.home) is not None
    assert CliRunner().invoke(cli, ["status", "--home", str(home_b)]).exit_code == 1


def _put_objects(c: Any) -> dict[str, str]:
    """Single-part, multipart, folder marker and a key that is also a folder; key -> ETag."""
    put = c.put_object
    etags = {
        "incoming/a.json": put(Bucket="shardline", Key="incoming/a.json", Body=b'{"a": 1}\n',
                               ContentType="application/json", Metadata={"src": "t"})["ETag"],
        "incoming/": put(Bucket="shardline", Key="incoming/", Body=b"")["ETag"],
        "x": put(Bucket="shardline", Key="x", Body=b"file")["ETag"],
        "x/y": put(Bucket="shardline", Key="x/y", Body=b"nested")["ETag"],
    }
    up = c.create_multipart_upload(Bucket="shardline", Key="big.bin")
    parts = []
    for n, body in enumerate([b"1" * (5 << 20), b"2" * 1000], 1):
        r = c.upload_part(Bucket="shardline", Key="big.bin",
                          UploadId=up["UploadId"], PartNumber=n, Body=body)
        parts.append({"ETag": r["ETag"], "PartNumber": n})
    etags["big.bin"] = c.complete_multipart_upload(
        Bucket="shardline", Key="big.bin", UploadId=up["UploadId"],
        MultipartUpload={"Parts": parts})["ETag"]
    return etags


def test_down_saves_objects_and_up_restores_them(stack_a: StackConfig, stacks: Stacks) -> None:
    state = stack.running_stack(stack_a.home)
    assert state is not None
    # objects the stack itself wrote (the deployed dataset config) are saved as well
    before = s3(state).list_objects_v2(Bucket="shardline").get("KeyCount", 0)
    etags = _put_objects(s3(state))
    assert etags["big.bin"].strip('"').endswith("-2")

    result = stack.down(stack_a.home)
    snap = stack_a.home / "s3-snapshot" / "shardline"
    # the events service records each upload under incoming/ as a pending key (detect in
    # O(new)); those that landed before down are saved too, and name only incoming/ keys
    pending = snap / "events" / "pending"
    markers = [p.relative_to(pending) for p in pending.rglob("*") if p.is_file()] \
        if pending.is_dir() else []
    assert len(markers) <= 2 and all(m.parts[0] == "incoming" for m in markers), markers
    assert result.snapshot is not None
    assert result.snapshot.objects == before + len(etags) + len(markers)
    assert (snap / "incoming" / "a.json").read_bytes() == b'{"a": 1}\n'
    assert (snap / "big.bin").stat().st_size == (5 << 20) + 1000
    assert all(gone(s.pid) for s in state.services.values()), "down left processes"
    assert processes_using(list(stack_a.ports.values())) == []
    assert not (stack_a.home / "stack.json").exists()

    again = stacks.up(stack_a)
    assert again.restored is not None
    assert again.restored.objects == before + len(etags) + len(markers)
    assert again.restored.etag_changed == []
    client = s3(again.state)
    for key, etag in etags.items():
        head = client.head_object(Bucket="shardline", Key=key)
        assert head["ETag"] == etag, key
    head = client.head_object(Bucket="shardline", Key="incoming/a.json")
    assert head["ContentType"] == "application/json" and head["Metadata"] == {"src": "t"}
    body = client.get_object(Bucket="shardline", Key="x/y")["Body"].read()
    assert body == b"nested"


def test_uploads_become_prefect_events_after_every_up(stack_a: StackConfig) -> None:
    """The events service: bucket notification -> SQS (moto) -> consumer -> Prefect events
    API. It is configured again on every up (the test above restarted the stack), and the
    objects the snapshot restored raise no event."""
    import time

    import httpx

    from shardline.infra.events.model import ObjectCreated

    st = stack.status(stack_a.home)
    events_svc = st["services"]["events"]
    assert events_svc["alive"] and events_svc["url"].endswith("/shardline-s3-events")
    state = stack.running_stack(stack_a.home)
    assert state is not None
    key = "incoming/events/new file.json"
    etag = s3(state).put_object(Bucket="shardline", Key=key, Body=b"{}")["ETag"]
    want = ObjectCreated("shardline", key, 2, etag)
    deadline, found = time.monotonic() + 20, []
    while not found and time.monotonic() < deadline:
        time.sleep(0.5)
        r = httpx.post(f"{state.prefect_api_url}/events/filter",
                       json={"filter": {"id": {"id": [str(want.event_id)]}}})
        found = r.json()["events"]
    assert found and found[0]["resource"]["prefect.resource.id"] == f"s3://shardline/{key}"
    assert found[0]["payload"] == {"bucket": "shardline", "key": key, "size": 2,
                                   "etag": want.etag}
    # incoming/a.json was uploaded once before the restart and restored after it: one event.
    accepted = [line for line in Path(events_svc["log"]).read_text().splitlines()
                if "accepted" in line and "s3://shardline/incoming/a.json" in line]
    assert len(accepted) == (1 if state.restored else 0), accepted
