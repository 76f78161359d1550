"""The ingest driver's decisions over whole runs (``tasks/driver.py``), on plain in-memory
stages (``driver_world``): what a run publishes, strikes, retries and raises, and in what
order, for each kind of failure. Pure: no store, no Spark, no Prefect."""

from __future__ import annotations

import pytest

from shardline.core.errors import (
    ConfigError,
    PublishConflict,
    TransientStoreError,
    ValidationFailed,
    WorkerStoreError,
)
from shardline.tasks.driver import Policy, run_ingest
from shardline.tasks.driver_stages import summarise
from tests.unit.driver_world import World


def test_a_clean_run_publishes_one_batch_then_drains_and_sweeps_last():
    world = World(5)
    seen: list[float] = []
    done, failure = world.run("r", progress=seen.append)
    assert failure is None and [len(d.batch.sources) for d in done] == [5]
    assert world.log == ["detect 5", "convert r", "publish", "detect None", "sweep r"]
    assert seen == [20.0, 60.0, 75.0, 100.0]
    result = summarise("digits", done, "s3://b/in/")
    assert (result.version, result.created, result.rows_published, result.more) == \
        (1, True, 5, [])


def test_nothing_new_is_a_result_with_no_version():
    world = World(0)
    done, failure = world.run("r")
    assert done == [] and failure is None and world.log == ["detect None", "sweep r"]
    assert summarise("digits", done, "s3://b/in/").message == \
        "nothing new under s3://b/in/; no version published"


def test_a_lost_race_goes_back_to_detect_with_a_new_pass_id():
    world = World(3, conflicts=2)
    done, failure = world.run("r")
    assert failure is None and len(done) == 1
    assert world.log[:7] == ["detect 3", "convert r", "conflict", "detect 3", "convert rr1",
                             "conflict", "detect 3"]
    assert world.strikes.docs == []                      # a lost race is no one's fault


@pytest.mark.parametrize("exc", [
    TransientStoreError("get s3://b/k: 503"), ConfigError("holdout_fraction differs"),
    WorkerStoreError("a Spark task failed on the store: ObjectChanged"),
    PublishConflict("lost 8 races"),
])
def test_an_environment_failure_ends_the_run_at_once_and_strikes_nothing(exc):
    world = World(4, failures=[exc])
    done, failure = world.run("r", Policy(attempts=1))
    assert failure is exc and done == []
    assert world.strikes.docs == [] and world.published == {}
    assert world.log == ["detect 4", "convert r", "sweep r"]     # the sweep still runs


def test_a_data_failure_strikes_the_batch_and_the_run_bisects_it_then_raises_it():
    world = World(8, crash={5})
    done, failure = world.run("r")
    assert isinstance(failure, RuntimeError) and str(failure) == "executor lost"
    assert set(world.published) == set(range(8)) - {5}   # the innocents, in the same run
    assert world.aside() == {5}
    assert world.log[-1] == "sweep r"                    # raised after the drain and sweep
    summary = summarise("digits", done, "s3://b/in/")   # what a run that returned would give
    assert summary.created and len(summary.more) == len(done) - 1 >= 1
    assert summary.rows_published + sum(m["rows_published"] for m in summary.more) == 7


def test_a_failed_suite_strikes_reports_and_the_clean_sources_publish():
    world = World(4, reject={0})
    rejected: list[str] = []
    done, failure = world.run("r", rejected=lambda b, conv, report: rejected.append(b.id))
    assert isinstance(failure, ValidationFailed)
    assert set(world.published) == {1, 2, 3} and world.aside() == {0}
    assert len(rejected) == len([e for e in world.log if e.startswith("strike")]) >= 2
    assert sum(d.pub.rows_published for d in done) == 3


def test_one_batch_per_run_when_asked():
    world = World(4, crash={0})
    done, failure = world.run("r", Policy(max_batches=1))
    assert done == [] and isinstance(failure, RuntimeError)
    assert world.log == ["detect 4", "convert r", "strike r", "sweep r"]


def test_settle_failing_does_not_fail_the_run():
    world = World(2)

    def settle(quiet_s: float) -> None:
        raise TransientStoreError("list s3://b/in/: timed out")

    stages = world.stages(settle=settle)
    done = run_ingest(stages, "r", Policy(quiet_s=5.0))
    assert len(done) == 1 and set(world.published) == {0, 1}


def test_the_chain_is_wired_in_one_place():
    """A stage change is one edit: the flow, the test helpers and the benchmarks reach
    convert and publish only through the driver's stages, so no module but
    ``tasks/driver_stages.py`` imports both (read from the source, function-level imports
    included)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    convert = {"shardline.tasks.convert.stage", "shardline.tasks.convert.stage.convert"}
    publish = {"shardline.tasks.publish", "shardline.tasks.publish.publish"}
    wiring = []
    for top in ("flows", "tasks", "bench", "infra", "trainer", "tests", "shardline/cli",
                "shardline/api"):
        for path in sorted((root / top).rglob("*.py")):
            names: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    names.update(f"{node.module}.{a.name}" for a in node.names)
                elif isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
            if names & convert and names & publish:
                wiring.append(str(path.relative_to(root)))
    assert wiring == ["tasks/driver_stages.py"]
