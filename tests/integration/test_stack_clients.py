"""The embedded stack seen from a client: a shell with no venv active that evals
``shardline status --env``, and the nightly deployment run by its own schedule.

One stack on free ports for the module, deployed as ``up`` does, with the nightly cron set
to every minute (``DeploySpec.nightly_cron``, the ``SHARDLINE_NIGHTLY_CRON`` of
prefect.yaml); stopped at teardown like the stacks of test_stack.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shardline.core.config import StoreSettings
from shardline.infra.stack_state import StackConfig, StackState, stack_env
from tests.integration.test_stack import Stacks, config

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits.toml"
VENV_BIN = Path(sys.executable).absolute().parent
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StackConfig,
                                                                          StackState]]:
    from shardline.infra.deploy import DeploySpec, deploy

    stacks = Stacks()
    try:
        cfg = config(tmp_path_factory.mktemp("clients"))
        state = stacks.up(cfg).state
        deploy(DeploySpec(config=DIGITS, api_url=state.prefect_api_url,
                          nightly_cron="* * * * *"),
               StoreSettings.from_env(stack_env(state)))
        yield cfg, state
    finally:
        leftovers = stacks.close()
    assert not leftovers, f"processes outlived `down`: {leftovers}"


def clean_shell(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``bash -c script`` with a bare environment: no venv on PATH, no VIRTUAL_ENV, no
    stack variables (only what a fresh login shell has)."""
    env = {"HOME": str(cwd), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return subprocess.run(["bash", "-c", script], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_status_env_works_in_a_shell_where_the_venv_is_not_active(
        deployed: tuple[StackConfig, StackState], tmp_path: Path) -> None:
    cfg, state = deployed
    assert not (Path("/usr/local/bin/shardline").exists() or
                Path("/usr/bin/shardline").exists())
    before = clean_shell("command -v shardline prefect", tmp_path)
    assert before.returncode != 0 and before.stdout == ""   # the control: nothing on PATH

    exe = VENV_BIN / "shardline"
    exports = clean_shell(f"'{exe}' status --env --home '{cfg.home}'", tmp_path)
    assert exports.returncode == 0, exports.stderr
    lines = exports.stdout.splitlines()
    assert all(ln.startswith("export ") for ln in lines), lines
    assert f'export PATH={VENV_BIN}:"$PATH"' in lines
    assert f"export SHARDLINE_HOME={cfg.home}" in lines
    assert f"export PREFECT_API_URL={state.prefect_api_url}" in lines

    script = f"""set -e
eval "$('{exe}' status --env --home '{cfg.home}')"
test -n "$PREFECT_API_URL" -a -n "$SHARDLINE_S3_ENDPOINT_URL" -a -n "$AWS_ACCESS_KEY_ID"
echo "which shardline=$(command -v shardline)"
echo "which prefect=$(command -v prefect)"
shardline status | head -2
shardline versions -c '{DIGITS}'
prefect deployment ls
"""
    run = clean_shell(script, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert f"which shardline={VENV_BIN / 'shardline'}" in out
    assert f"which prefect={VENV_BIN / 'prefect'}" in out
    assert f"stack\t{cfg.home}\t" in out                      # found from SHARDLINE_HOME
    assert "no versions of digits yet under s3://shardline/" in run.stderr   # S3 + keys
    assert "ingest/digits-nightly" in out                       # the stack's Prefect API


def test_the_nightly_schedule_creates_and_runs_a_flow_run(
        deployed: tuple[StackConfig, StackState]) -> None:
    """Nobody creates a run: the Prefect server's scheduler makes one from the cron, the
    stack's worker runs it, and the ingest finds nothing new in the empty bucket."""
    _, state = deployed
    api = state.prefect_api_url
    deps = httpx.post(f"{api}/deployments/filter", json={}, timeout=10).json()
    nightly = next(d for d in deps if d["name"] == "digits-nightly")
    assert [(s["schedule"].get("cron"), s["active"]) for s in nightly["schedules"]] == [
        ("* * * * *", True)]
    body = {"flow_runs": {"deployment_id": {"any_": [nightly["id"]]}},
            "sort": "EXPECTED_START_TIME_ASC", "limit": 50}
    deadline, runs, done = time.monotonic() + 300, [], []
    while time.monotonic() < deadline:
        runs = httpx.post(f"{api}/flow_runs/filter", json=body, timeout=10).json()
        done = [r for r in runs if r["state"] and r["state"]["type"] in TERMINAL]
        if done:
            break
        time.sleep(2)
    assert done, f"no scheduled run finished in 300 s: {[r['name'] for r in runs]}"
    assert all(r["auto_scheduled"] for r in runs), "a run not made by the scheduler"
    run = done[0]
    assert run["state"]["type"] == "COMPLETED", run["state"]
    assert re.fullmatch(r"ingest-digits-nothing-new-schedule-[0-9a-f]{6}", run["name"]), \
        run["name"]
    assert "trigger:schedule" in run["tags"]
    httpx.patch(f"{api}/deployments/{nightly['id']}", json={"paused": True}, timeout=10)


@pytest.mark.browser
@pytest.mark.skipif(not (Path("/usr/bin/chromium").exists() and
                         Path("/usr/bin/chromedriver").exists()),
                    reason="needs Debian chromium + chromium-driver (make test installs them)")
def test_both_prefect_uis_show_the_quarantine_thumbnails(
        deployed: tuple[StackConfig, StackState]) -> None:
    """The markdown the ingest writes, as a person sees it: the thumbnails (data:image/png
    URIs) load as images in the V2 (default) and the V1 UI; the bomb shows its mark."""
    import base64

    from shardline.flows import quarantine_view as qv
    from shardline.flows.artifacts import quarantine_markdown
    from tests.integration.test_pipeline_e2e import _browser
    from tests.unit.test_containment import png_bomb
    from tests.unit.test_quarantine_view import png

    _, state = deployed

    def row(i: int, image: bytes, rule: str) -> dict[str, object]:
        line = f'{{"id": "r{i}", "label": 1, "image": "{base64.b64encode(image).decode()}"}}'
        return {"source_key": "incoming/digits/a.jsonl", "source_row": i, "rule": rule,
                "raw": line.encode()}

    rows = [row(0, png(100, 50, "RGB"), "wrong_shape"), row(1, png(8, 8), "unknown_label"),
            row(2, png_bomb(100_000, 100_000), "image_too_large")]
    items = [(r, qv.preview(r, "image")) for r in rows]
    text = quarantine_markdown("uidigits", "b1", {"wrong_shape": 1, "unknown_label": 1,
                                                   "image_too_large": 1}, [],
                               qv.rows_markdown(items, 3))
    art = httpx.post(f"{state.prefect_api_url}/artifacts/", timeout=10, json={
        "key": "uidigits-quarantine", "type": "markdown", "data": text}).json()
    loaded_js = ("return [...document.querySelectorAll('img')].filter(i => "
                 "i.src.startsWith('data:image/png') && i.complete && i.naturalWidth > 0)"
                 ".map(i => [i.naturalWidth, i.naturalHeight]);")
    out = ROOT / "tests" / "output"
    out.mkdir(parents=True, exist_ok=True)
    driver = _browser()
    try:
        for ui, path in (("v2", f"/v2/artifacts/artifact/{art['id']}"),
                         ("v1", f"/artifacts/artifact/{art['id']}")):
            driver.get(state.prefect_ui_url.rstrip("/") + path)
            deadline, sizes = time.monotonic() + 90, []
            while time.monotonic() < deadline:
                sizes = driver.execute_script(loaded_js)
                if len(sizes) >= 2:
                    break
                time.sleep(1)
            driver.save_screenshot(str(out / f"prefect-ui-{ui}-quarantine-thumbnails.png"))
            assert sorted(sizes) == [[48, 24], [48, 48]], (ui, sizes)
            body = driver.find_element("tag name", "body").text
            assert "not previewed" in body and "incoming/digits/a.jsonl" in body, (ui, body)
    finally:
        driver.quit()
