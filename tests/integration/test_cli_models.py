"""``shardline models`` shows the model history, not only the live model: promoted and
refused candidates with their metrics and gate reasons, which one is live, which were
promoted before (``promoted.json``'s ``history``). The registry is written through
``ModelRegistry`` (the calls the trainer makes), on real moto S3; the CLI is a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from shardline.core.store import ObjectStore
from shardline.trainer.registry import ModelRegistry
from tests.integration.api_data import Published
from tests.integration.test_cli import config, env, published, run  # noqa: F401 - fixtures


def candidate(reg: ModelRegistry, accuracy: float, passed: bool, reason: str,
              parent: int | None) -> int:
    n = reg.claim(f"run-{accuracy}")
    reg.save(n, b"", b"", {
        "model_version": n, "dataset_version": 3, "parent_model_version": parent,
        "created_at": f"2026-11-23T10:0{n}:00+00:00", "samples_seen": 100 * n,
        "metrics": {"after": {"accuracy": accuracy, "new_accuracy": accuracy - 0.01,
                              "earlier_accuracy": accuracy + 0.01}},
        "gate": {"passed": passed, "reason": reason}})
    if passed:
        before = reg.promoted()
        hist = [*(before.pointer.get("history", []) if before else []), n]
        reg.promote(n, before, {"accuracy": accuracy, "dataset_version": 3, "history": hist})
    return n


def test_models_shows_promoted_and_refused_candidates_and_the_live_one(
        env: dict[str, str], config: Path, published: Published,  # noqa: F811
        store: ObjectStore) -> None:
    reg = ModelRegistry(store, published.cfg.dataset.name, published.cfg.train.model)
    candidate(reg, 0.90, True, "first model", None)
    candidate(reg, 0.85, False, "0.8500 is below the best promoted 0.9000", 1)
    candidate(reg, 0.93, True, "0.9300 beats the best promoted 0.9000", 1)
    reg.claim("run-in-progress")                                  # no meta.json yet

    r = run(env, "models", "-c", str(config))
    assert r.returncode == 0, r.stderr
    header, *lines = r.stdout.splitlines()
    cols = header.split("\t")
    assert cols == ["model", "status", "dataset_version", "parent", "accuracy",
                    "accuracy_new", "accuracy_earlier", "gate", "promoted", "created", "reason"]
    table = [dict(zip(cols, x.split("\t"), strict=True)) for x in lines]
    assert [(t["model"], t["status"], t["promoted"], t["gate"]) for t in table] == [
        ("4", "incomplete", "no", "-"), ("3", "complete", "live", "passed"),
        ("2", "complete", "no", "refused"), ("1", "complete", "earlier", "passed")]
    assert table[2]["accuracy"] == "0.8500" and table[2]["accuracy_earlier"] == "0.8600"
    assert table[2]["reason"] == "0.8500 is below the best promoted 0.9000"   # in full
    assert table[1]["parent"] == "1" and table[1]["created"] == "2026-11-23T10:03:00+00:00"

    data = json.loads(run(env, "models", "-c", str(config), "--json").stdout)
    assert data["live"] == 3 and data["promoted_history"] == [1, 3]
    by_n = {m["model"]: m for m in data["models"]}
    assert [by_n[n]["promotion"] for n in (1, 2, 3, 4)] == ["earlier", "no", "live", "no"]
    assert [by_n[n]["promoted"] for n in (1, 2, 3, 4)] == [False, False, True, False]
    assert by_n[2]["accuracy"] == 0.85 and by_n[2]["gate"] == "refused"
