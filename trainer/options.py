"""Run options that are not part of the dataset's [train] table: how to run, not what to
learn. Defaults suit a laptop and a GPU node alike; the CLI and flow pass them through."""

from __future__ import annotations

from dataclasses import dataclass, field

from shardline.trainer.loader import LoaderSpec


@dataclass(frozen=True)
class RunOptions:
    device: str | None = None          # None: CUDA when present, else CPU
    amp: bool = True                   # bf16 autocast on CUDA (ignored on CPU)
    log_every: int = 50                # steps between progress lines (rank 0)
    curve_every: int = 10              # steps between training-curve points
    checkpoint_every: int = 200        # steps between in-progress checkpoints (+ epoch ends)
    resume: bool = True                # continue an interrupted run with the same inputs
    eval_each_epoch: bool = True       # held-out accuracy per epoch for the training curve
    loader: LoaderSpec = field(default_factory=LoaderSpec)

    def __post_init__(self) -> None:
        if min(self.log_every, self.checkpoint_every, self.curve_every) <= 0:
            raise ValueError(f"log_every, checkpoint_every and curve_every must be positive, "
                             f"got {self.log_every=}, {self.checkpoint_every=}, "
                             f"{self.curve_every=}")
