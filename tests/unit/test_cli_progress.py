"""The training bar: driven by the trainer loop's own progress records; in a pipe the
records pass through unchanged (plain lines) and nothing is drawn."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console
from rich.progress import Progress

from shardline.cli.progress import LOOP_LOGGER, EpochBar, epoch_bar


def _record(step: int, epoch: int) -> logging.LogRecord:
    return logging.LogRecord(LOOP_LOGGER, logging.INFO, __file__, 1,
                             "step %d epoch %d loss %.4f acc %.3f samples/s %.0f "
                             "data-wait %.1f%%", (step, epoch, 0.5, 0.9, 1234.0, 0.1), None)


def test_the_bar_moves_by_epochs_then_by_steps_once_an_epoch_length_is_known() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=160)
    with Progress(console=console) as progress:
        task = progress.add_task("1/3", total=3, info="")
        bar = EpochBar(progress, task, epochs=3)
        seen = []
        for step, epoch in [(50, 0), (80, 0), (100, 1), (120, 1), (160, 1), (240, 2)]:
            bar.emit(_record(step, epoch))
            t = progress.tasks[0]
            seen.append((t.completed, t.description))
    # epoch 0 ends at step 80 (its last record): later steps count in epochs of 80
    assert seen == [(0, "epoch 1/3"), (0, "epoch 1/3"), (1.25, "epoch 2/3"),
                    (1.5, "epoch 2/3"), (2.0, "epoch 2/3"), (3, "epoch 3/3")]
    assert progress.tasks[0].fields["info"] == ("step 240 loss 0.5000 acc 0.900 1,234 samples/s "
                                                "data-wait 0.1%")


def test_in_a_pipe_the_loop_lines_pass_and_no_bar_is_drawn(
        capsys: pytest.CaptureFixture[str]) -> None:
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    root, keep = logging.getLogger(), Keep(logging.INFO)
    root.addHandler(keep)
    loop = logging.getLogger(LOOP_LOGGER)
    level = loop.level
    loop.setLevel(logging.INFO)
    try:
        with epoch_bar(3):
            loop.handle(_record(10, 0))
    finally:
        root.removeHandler(keep)
        loop.setLevel(level)
    assert got == ["step 10 epoch 0 loss 0.5000 acc 0.900 samples/s 1234 data-wait 0.1%"]
    captured = capsys.readouterr()
    assert "━" not in captured.err + captured.out
    assert not [h for h in loop.handlers if isinstance(h, EpochBar)]
