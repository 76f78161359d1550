"""CLI output: complete rows in a pipe, errors on one line with [brackets] kept."""

from __future__ import annotations

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
