"""Training epochs as a progress bar on a terminal.

The trainer reports progress as plain ``logging`` lines (``shardline.trainer.loop``: step,
epoch, loss, accuracy, samples/s, data wait; every ``log_every`` steps and at each epoch's
end), so it needs no UI code and runs the same under torchrun or in a Prefect flow. On a
terminal, :func:`epoch_bar` turns those records into a rich bar (epochs done of the
configured epochs, the latest loss and throughput) and keeps the trainer's and Prefect's INFO
lines off the console (a flow run still sends them to the Prefect UI). In a pipe (CI, a
worker's log) nothing changes: one plain line per interval, which a log reads better than a
redrawn bar.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from shardline.cli.output import err

LOOP_LOGGER = "shardline.trainer.loop"


class EpochBar(logging.Handler):
    """Moves the bar from the loop's progress records ``(step, epoch, loss, accuracy,
    samples/s, data wait %)``; epochs count from 0. Within an epoch the bar moves by steps
    once the first epoch's length is known (its end is always logged)."""

    def __init__(self, progress: Any, task: Any, epochs: int) -> None:
        super().__init__(logging.INFO)
        self.progress, self.task, self.epochs = progress, task, max(epochs, 1)
        self.steps_per_epoch: int | None = None
        self.last_step_of_first = 0

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 6:
            return
        step, epoch = int(args[0]), int(args[1])   # type: ignore[call-overload]
        loss, acc, rate, wait = (float(a) for a in args[2:])   # type: ignore[arg-type]
        if epoch == 0:
            self.last_step_of_first = step
        elif self.steps_per_epoch is None:
            self.steps_per_epoch = self.last_step_of_first or None
        done = float(epoch)
        if self.steps_per_epoch:
            done = max(done, step / self.steps_per_epoch)
        self.progress.update(
            self.task, completed=min(done, self.epochs),
            description=f"epoch {min(epoch + 1, self.epochs)}/{self.epochs}",
            info=f"step {step} loss {loss:.4f} acc {acc:.3f} {rate:,.0f} samples/s "
                 f"data-wait {wait:.1f}%")


class _OffConsole(logging.Filter):
    """INFO lines of the trainer and of Prefect's flow/task runs stay off the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return not record.name.startswith(("shardline.trainer", "prefect.flow_runs",
                                           "prefect.task_runs"))


@contextlib.contextmanager
def epoch_bar(epochs: int, title: str = "training") -> Iterator[None]:
    """A bar of ``epochs`` on stderr while the block trains, when stderr is a terminal and
    ``--debug`` is off; otherwise nothing changes. Enter it after logging is configured
    (Prefect's console handler, or ``basicConfig``): it filters the root's handlers."""
    from shardline.cli.output import debug

    if not err.is_terminal or debug():
        yield
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn(f"{title} [bold]{{task.description}}"), BarColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[info]}"))
    loop = logging.getLogger(LOOP_LOGGER)
    consoles = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    off, level = _OffConsole(), loop.level
    with Progress(*columns, console=err) as progress:
        bar = EpochBar(progress, progress.add_task(f"1/{epochs}", total=max(epochs, 1),
                                                   info="starting"), epochs)
        loop.addHandler(bar)
        loop.setLevel(logging.INFO)
        for h in consoles:
            h.addFilter(off)
        try:
            yield
            progress.update(bar.task, completed=bar.epochs)
        finally:
            for h in consoles:
                h.removeFilter(off)
            loop.removeHandler(bar)
            loop.setLevel(level)
