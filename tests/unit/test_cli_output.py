"""CLI output: complete rows in a pipe, errors on one line with [brackets] kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from shardline.cli import output
from shardline.cli.preflight import _ranges
from shardline.core.errors import ConfigError


def test_rows_in_a_pipe_are_complete_tab_separated_lines(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    long = "x" * 300
    output.rows([{"version": 3, "batch": long, "acc": 0.98765, "none": None},
                 {"version": 2, "batch": "b\tc", "acc": None, "none": [1, 2]}])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["version\tbatch\tacc\tnone", f"3\t{long}\t0.9877\t-", "2\tb c\t-\t1,2"]


def test_empty_rows_say_so_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    output.rows([], empty="no versions of [digits] yet")
    captured = capsys.readouterr()
    assert captured.out == "" and "no versions of [digits] yet" in captured.err


def test_errors_are_one_line_and_keep_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as e:
        output.fail(ConfigError("f.toml: [train] lr: expected a number,\n got 'x'"))
    assert e.value.exit_code == 1
    assert capsys.readouterr().err.strip() == (
        "error: f.toml: [train] lr: expected a number, got 'x'")


def test_unexpected_errors_name_their_type_and_point_at_debug() -> None:
    assert output.one_line(RuntimeError("Failed to reach API")) == (
        "RuntimeError: Failed to reach API (run with --debug for the traceback)")


def test_version_ranges() -> None:
    assert _ranges([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    assert _ranges([4]) == "4"


def test_status_in_a_pipe_prints_every_value_in_full(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    from shardline.cli.stack_cmds import _print_status

    log = str(tmp_path / ("a-long-folder-name" * 5) / "s3.log")
    st = {"home": str(tmp_path), "started_at": "2026-11-23T16:00:00+00:00", "phase": "up",
          "services": {"s3": {"alive": True, "healthy": True, "pid": 2345678,
                              "url": "http://127.0.0.1:9310", "log": log}},
          "s3_endpoint": "http://127.0.0.1:9310", "bucket": "shardline",
          "prefect_api_url": "http://127.0.0.1:4200/api",
          "prefect_ui_url": "http://127.0.0.1:4200", "spark_remote": "sc://127.0.0.1:15002",
          "database": "postgresql"}
    _print_status(st)
    out = capsys.readouterr().out.splitlines()
    assert f"s3\thealthy\t2345678\thttp://127.0.0.1:9310\t{log}" in out
    assert "Prefect API\thttp://127.0.0.1:4200/api" in out
