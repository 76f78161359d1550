"""The trainer's run settings: how to run, not what to learn. One home for all of them.

The trainer reads two kinds of settings, and only two:

* ``TrainConfig`` (``[train]`` in the dataset's TOML, ``shardline.core.config``): **what is
  learned**: model, width, depth, epochs, batch size, learning rate, weight decay, replay
  ratio, held-out fraction, gate tolerance, seed, shuffle window, and the shard cache's
  place and size. Everything in it but the cache settings goes into the run key (a run with
  the same values resumes) and into every model's ``meta.json``.
* ``RunOptions`` (here): **how a run executes**: device, autocast, log/curve/checkpoint
  cadence, resume, and the loader's knobs (``LoaderSpec``, nested). The CLI, the Prefect
  flow and ``python -m shardline.trainer`` pass them through; none of them changes which
  samples a run sees or, on the CPU, the weights it produces.

Defaults suit a laptop and a GPU node alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoaderSpec:
    """Loader knobs; defaults suit both 8x8 and 224x224 images."""

    window_min_shards: int = 8
    prefetch_batches: int | None = None  # None: 4 when feeding CUDA, else 0 (no thread)
    keep_open_mb: float = 1024.0       # pixel data of shards kept open across windows
    lookahead_mb: float = 512.0        # shard bytes fetched ahead of the reader
    eval_batch_size: int = 512


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
