"""CLI habits: shell completion answers, an example in every command's --help, and the
upload plan (which local file goes to which key)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardline.cli.examples import EXAMPLES, add_examples
from shardline.cli.main import app
from shardline.cli.upload_cmd import plan_uploads
from shardline.core.errors import ConfigError

EXE = str(Path(sys.executable).parent / "shardline")


def complete(words: str, cword: int) -> list[str]:
    env = {**os.environ, "_SHARDLINE_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(cword)}
    r = subprocess.run([EXE], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_completion_is_installed_and_answers() -> None:
    assert complete("shardline ing", 1) == ["ingest"]
    assert complete("shardline models pr", 2) == ["promote"]
    assert "--config" in complete("shardline upload --c", 2)
    shown = subprocess.run([EXE, "--show-completion"], env={**os.environ, "SHELL": "/bin/bash"},
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "_SHARDLINE_COMPLETE=complete_bash" in shown.stdout, \
        shown.stderr


def test_every_command_has_an_example_that_names_itself() -> None:
    assert add_examples(app) == []
    for name, example in EXAMPLES.items():
        assert example.startswith("shardline " + name.split()[0]), (name, example)
    r = subprocess.run([EXE, "upload", "--help"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "COLUMNS": "200"})
    assert "Example: shardline upload ./my-drop/ -c examples/digits.toml" in r.stdout


def test_uploads_keep_relative_paths_and_skip_hidden_files(tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    (drop / "3").mkdir(parents=True)
    (drop / "3" / "a.png").write_bytes(b"x")
    (drop / "b.jsonl").write_bytes(b"{}")
    (drop / ".DS_Store").write_bytes(b"junk")
    (drop / ".git").mkdir()
    (drop / ".git" / "HEAD").write_bytes(b"junk")
    one = tmp_path / "c.csv"
    one.write_text("id\n")
    plan = plan_uploads([drop, one], "incoming/d/")
    assert [(p.relative_to(tmp_path).as_posix(), k) for p, k in plan] == [
        ("drop/3/a.png", "incoming/d/3/a.png"), ("drop/b.jsonl", "incoming/d/b.jsonl"),
        ("c.csv", "incoming/d/c.csv")]
    with pytest.raises(ConfigError, match="no such file or folder"):
        plan_uploads([tmp_path / "nope"], "incoming/d/")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no files"):
        plan_uploads([tmp_path / "empty"], "incoming/d/")
