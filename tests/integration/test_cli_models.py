"""``shardline models`` shows the model history, not only the live model: promoted and
refused candidates with their metrics and gate reasons, which one is live, which were
promoted before (``promoted.json``'s ``history``). The registry is written through
``ModelRegistry`` (the calls the trainer makes), on real moto S3; the CLI is a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardline.core.errors import ObjectChanged, ObjectExists
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
                    "accuracy_new", "accuracy_earlier", "metric", "gate", "promoted", "corrected",
                    "deleted", "created", "reason"]
    table = [dict(zip(cols, x.split("\t"), strict=True)) for x in lines]
    assert [(t["model"], t["status"], t["promoted"], t["gate"]) for t in table] == [
        ("4", "incomplete", "no", "-"), ("3", "complete", "live", "passed"),
        ("2", "complete", "no", "refused"), ("1", "complete", "earlier", "passed")]
    assert table[2]["accuracy"] == "0.8500" and table[2]["accuracy_earlier"] == "0.8600"
    assert table[2]["reason"] == "0.8500 is below the best promoted 0.9000"   # in full
    assert table[1]["parent"] == "1" and table[1]["created"] == "2026-11-23T10:03:00+00:00"
    assert {(t["corrected"], t["deleted"]) for t in table[1:]} == {("0", "0")}   # grew only

    data = json.loads(run(env, "models", "-c", str(config), "--json").stdout)
    assert data["live"] == 3 and data["promoted_history"] == [1, 3]
    by_n = {m["model"]: m for m in data["models"]}
    assert [by_n[n]["promotion"] for n in (1, 2, 3, 4)] == ["earlier", "no", "live", "no"]
    assert [by_n[n]["promoted"] for n in (1, 2, 3, 4)] == [False, False, True, False]
    assert by_n[2]["accuracy"] == 0.85 and by_n[2]["gate"] == "refused"


def test_a_regression_model_shows_its_rmse_not_its_mean_row_score_as_accuracy(
        env: dict[str, str], config: Path, published: Published,  # noqa: F811
        store: ObjectStore) -> None:
    """A regression model's mean row score is minus its MSE: the accuracy columns stay
    empty and ``metric`` carries the RMSE (as the trainer records a regression run)."""
    reg = ModelRegistry(store, published.cfg.dataset.name, "reg")
    n = reg.claim("run-regression")
    reg.save(n, b"", b"", {
        "model_version": n, "dataset_version": 3, "parent_model_version": None,
        "created_at": "2026-11-23T10:00:00+00:00", "objective": {"kind": "regression"},
        "metrics": {"after": {"accuracy": -2950.0, "new_accuracy": -2950.0,
                              "earlier_accuracy": None, "primary": "rmse",
                              "metrics": {"rmse": 54.3, "mae": 40.0, "r2": 0.8}}},
        "gate": {"passed": True, "reason": "first model"}})
    r = run(env, "models", "-c", str(config), "--model", "reg")
    assert r.returncode == 0, r.stderr
    header, line = r.stdout.splitlines()
    row = dict(zip(header.split("\t"), line.split("\t"), strict=True))
    assert (row["accuracy"], row["accuracy_new"], row["accuracy_earlier"]) == ("-", "-", "-")
    assert row["metric"] == "rmse 54.3000"
    [data] = json.loads(run(env, "models", "-c", str(config), "--model", "reg",
                            "--json").stdout)["models"]
    assert data["accuracy"] is None and data["primary"] == "rmse"
    assert data["metrics"]["r2"] == 0.8


def test_promote_rollback_and_pin_move_the_live_pointer_and_log_who_asked(
        env: dict[str, str], config: Path, published: Published,  # noqa: F811
        store: ObjectStore) -> None:
    from shardline.trainer.moves import MoveRefused, move

    name = published.cfg.dataset.name
    reg = ModelRegistry(store, name, published.cfg.train.registry_name)
    candidate(reg, 0.90, True, "first model", None)
    candidate(reg, 0.85, False, "refused", 1)
    candidate(reg, 0.93, True, "better", 1)

    r = run(env, "models", "rollback", "-c", str(config), "--by", "alice",
            "--reason", "3 misbehaves in production")
    assert r.returncode == 0, r.stderr
    assert "rollback by alice: live model 3 -> 1" in r.stdout
    assert reg.promoted().number == 1

    r = run(env, "models", "pin", "2", "-c", str(config), "--by", "bob", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["live"] == 2
    pointer = reg.promoted()
    assert pointer.number == 2 and pointer.pointer["pinned"]["by"] == "bob"

    r = run(env, "models", "promote", "9", "-c", str(config))
    assert r.returncode == 1 and "model 9" in r.stderr and "no complete model" in r.stderr
    assert reg.promoted().number == 2                        # a refused move moves nothing

    # the move is conditional: a view of the pointer older than the last move fails
    stale = reg.promoted()
    move(reg, "promote", "carol", "", 3)
    with pytest.raises((ObjectChanged, ObjectExists)):
        reg.promote(1, stale, {"history": [1]}, move={"action": "promote", "by": "late"})
    assert "late" not in json.dumps(reg.promoted().pointer)
    with pytest.raises(MoveRefused, match="unknown move 'demote'"):
        move(reg, "demote", "dave")

    data = json.loads(run(env, "models", "-c", str(config), "--json").stdout)
    log = [(m["action"], m["from"], m["to"], m["by"]) for m in data["moves"]]
    assert log == [("promote", None, 1, "gate (training run)"),
                   ("promote", 1, 3, "gate (training run)"), ("rollback", 3, 1, "alice"),
                   ("pin", 1, 2, "bob"), ("promote", 2, 3, "carol")]
    assert data["live"] == 3 and data["pinned"] is None      # promote unpins
    rows = {m["model"]: m for m in data["models"]}
    assert "rollback by alice" in rows[1]["moves"] and "3 misbehaves" in rows[1]["moves"]
    assert "pin by bob" in rows[2]["moves"]
