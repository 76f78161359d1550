"""The stack's configuration, state file, start order and snapshot naming, without servers."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from shardline.infra import stack
from shardline.infra.services import Service
from shardline.infra.snapshot import ESCAPED, etag_of, file_names
from shardline.infra.stack_state import StackConfig, StackError, StackState, stack_env


def test_arguments_win_over_environment_over_defaults(tmp_path: Path) -> None:
    env = {"SHARDLINE_HOME": str(tmp_path / "h"), "SHARDLINE_S3_PORT": "9400",
           "SHARDLINE_SPARK_PORT": "9401", "SHARDLINE_BUCKET": "from-env"}
    cfg = StackConfig.resolve(ports={"spark": 9500}, env=env)
    assert cfg.home == (tmp_path / "h").resolve()
    assert dict(cfg.ports) == {"s3": 9400, "prefect": 4200, "spark": 9500}
    assert cfg.bucket == "from-env"
    assert cfg.prefect_home == cfg.home / "prefect"
    default = StackConfig.resolve(env={})
    assert default.home == (Path.cwd() / ".shardline").resolve()
    assert dict(default.ports) == {"s3": 9310, "prefect": 4200, "spark": 15002}
    assert default.bucket == "shardline"


@pytest.mark.parametrize(("kwargs", "env", "message"), [
    ({}, {"SHARDLINE_PREFECT_PORT": "http"}, r"SHARDLINE_PREFECT_PORT must be a TCP port.*'http'"),
    ({"ports": {"s3": 70000}}, {}, r"the s3 port must be a TCP port.*70000"),
    ({"ports": {"s3": 4200}}, {}, r"each service needs its own port"),
    ({"ports": {"minio": 1}}, {}, r"unknown service\(s\) \['minio'\]; known"),
    ({"bucket": "My_Bucket"}, {}, r"'My_Bucket' is not a valid S3 bucket name"),
])
def test_bad_settings_name_the_value(kwargs: dict, env: dict, message: str) -> None:
    with pytest.raises(StackError, match=message):
        StackConfig.resolve(env=env, **kwargs)


def _state(home: Path) -> StackState:
    svcs = {
        "s3": Service("s3", 11, 9310, "http://127.0.0.1:9310", "s3.log"),
        "prefect": Service("prefect", 12, 4200, "http://127.0.0.1:4200", "p.log",
                           "http://127.0.0.1:4200/api/health", "SIGINT", 123, 4.5),
        "spark": Service("spark", 13, 15002, "sc://127.0.0.1:15002", "sp.log"),
    }
    return StackState(str(home), "shardline", "2026-01-01T00:00:00+00:00", svcs, "up")


def test_state_round_trips_and_gives_client_environment(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.save()
    loaded = stack.load_state(tmp_path)
    assert loaded == state
    assert stack_env(loaded) == {
        "SHARDLINE_S3_ENDPOINT_URL": "http://127.0.0.1:9310",
        "SHARDLINE_BUCKET": "shardline",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PREFECT_API_URL": "http://127.0.0.1:4200/api",
        "SHARDLINE_SPARK_REMOTE": "sc://127.0.0.1:15002",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }


def test_broken_state_file_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "stack.json").write_text("{not json")
    with pytest.raises(StackError, match=r"stack.json cannot be read.*delete it"):
        stack.load_state(tmp_path)


def test_dead_processes_are_not_a_running_stack(tmp_path: Path) -> None:
    state = _state(tmp_path)
    for svc in state.services.values():  # PIDs with another start time: not ours
        svc.pid, svc.started_ticks = 1, -1
    state.save()
    assert stack.running_stack(tmp_path) is None
    assert stack.status(tmp_path)["running"] is False


def _names(waves: list) -> list[list[str]]:
    return [[s.name for s in w] for w in waves]


def test_services_start_after_what_they_need(tmp_path: Path) -> None:
    def launch(_: StackConfig, __: object) -> None:
        raise AssertionError("not started here")

    base = tuple(s for s in stack.SERVICES if not s.after)
    extra = stack.ServiceSpec("extra", launch, after=("postgres",))  # type: ignore[arg-type]
    assert _names(stack._waves((*base, extra))) == [["s3", "spark", "postgres", "warm"],
                                                    ["extra"]]
    # The default stack: Prefect on PostgreSQL; the worker and the S3-events consumer start
    # once the servers answer; the warm flow-run server (imports only) needs nothing.
    assert _names(stack._waves(stack.SERVICES)) == [
        ["s3", "spark", "postgres", "warm"], ["prefect"], ["worker", "train-worker", "events"]]
    sqlite = StackConfig.resolve(tmp_path, env={"SHARDLINE_PREFECT_DB": "SQLite"})
    assert sqlite.database == "sqlite"
    assert _names(stack._waves(stack.service_specs(sqlite))) == [
        ["s3", "spark", "prefect", "warm"], ["worker", "train-worker", "events"]]
    cluster = StackConfig.resolve(tmp_path, spark_workers=2, env={})
    assert _names(stack._waves(stack.service_specs(cluster))) == [
        ["s3", "spark-master", "postgres", "warm"],
        ["spark-worker-1", "spark-worker-2", "prefect"],
        ["spark", "train-worker", "events"], ["worker"]]
    loop = stack.ServiceSpec("a", launch, after=("b",))  # type: ignore[arg-type]
    with pytest.raises(StackError, match=r"\['a'\] wait for each other or for unknown"):
        stack._waves((loop,))


@pytest.mark.parametrize(("kwargs", "env", "message"), [
    ({}, {"SHARDLINE_PREFECT_DB": "mysql"}, r"'mysql' is not one of \('postgres', 'sqlite'\)"),
    ({}, {"SHARDLINE_SPARK_WORKERS": "two"}, r"Spark workers.*0 \(local mode\) to 16.*'two'"),
    ({"spark_workers": 99}, {}, r"to 16, got 99"),
    ({"spark_workers": 2, "spark_master": "spark://h:7077"}, {},
     r"workers=2 starts a standalone cluster.*'spark://h:7077'"),
    ({}, {"SHARDLINE_POSTGRES_PORT": "4200"}, r"SHARDLINE_POSTGRES_PORT=4200 is also the port"),
])
def test_bad_engine_settings_name_the_value(kwargs: dict, env: dict, message: str) -> None:
    with pytest.raises(StackError, match=message):
        StackConfig.resolve(env=env, **kwargs)


def test_engine_settings_from_environment(tmp_path: Path) -> None:
    cfg = StackConfig.resolve(tmp_path, env={"SHARDLINE_SPARK_WORKERS": "3",
                                             "SHARDLINE_POSTGRES_PORT": "9399"})
    assert (cfg.database, cfg.spark_workers, cfg.db_port) == ("postgres", 3, 9399)
    assert cfg.db_root == cfg.home / "postgres"
    default = StackConfig.resolve(tmp_path, env={})
    assert (default.database, default.spark_workers, default.db_port) == ("postgres", 0, None)


def test_status_names_the_database_without_its_password(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.save()
    assert stack.status(tmp_path)["database"] == f"sqlite:///{tmp_path}/prefect/prefect.db"
    state.services["postgres"] = Service("postgres", 14, 5555,
                                         "postgresql://shardline@127.0.0.1:5555/prefect", "l")
    state.save()
    assert stack.status(tmp_path)["database"] == "postgresql://shardline@127.0.0.1:5555/prefect"


def test_snapshot_file_names_keep_keys_as_paths_when_safe() -> None:
    keys = ["incoming/a.json", "incoming/", "x", "x/y", "a/../b", "sp ace/ü.txt"]
    names = file_names("bkt", keys)
    assert names["incoming/a.json"] == "bkt/incoming/a.json"
    assert names["x/y"] == "bkt/x/y"
    assert names["sp ace/ü.txt"] == "bkt/sp ace/ü.txt"
    for key in ("incoming/", "x", "a/../b"):  # folder marker, file-vs-folder, traversal
        assert names[key] == f"{ESCAPED}/bkt/{hashlib.sha256(key.encode()).hexdigest()}"
    assert len(set(names.values())) == len(keys)


def test_etag_of_single_and_multipart(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * 10 + b"b" * 3)
    assert etag_of(path, None) == hashlib.md5(path.read_bytes()).hexdigest()
    parts = hashlib.md5(b"a" * 10).digest() + hashlib.md5(b"b" * 3).digest()
    assert etag_of(path, [10, 3]) == f"{hashlib.md5(parts).hexdigest()}-2"


def test_service_environments_drop_the_callers_cloud_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shardline.infra import services, worker
    from shardline.infra.events import service as events_service

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_SHARED_CREDENTIALS_FILE", "PREFECT_API_KEY"):
        monkeypatch.setenv(k, f"caller-{k}")
    monkeypatch.setenv("LANG", "C.UTF-8")
    cfg = StackConfig.resolve(tmp_path, env={})
    envs = {"base": services.base_env(), "prefect": services.prefect_env(1, tmp_path),
            "spark": services.spark_env(tmp_path), "worker": worker.worker_env(cfg),
            "events": events_service.consumer_env(cfg)}
    for name, env in envs.items():
        assert not [v for v in env.values() if v.startswith("caller-")], name
        assert env["LANG"] == "C.UTF-8", name  # the rest of the caller's environment stays
    # Only the consumer talks to the stack's S3 (SQS) itself: with the stack's own keys.
    assert envs["events"]["AWS_ACCESS_KEY_ID"] == "testing"
    assert "AWS_ACCESS_KEY_ID" not in envs["worker"]
