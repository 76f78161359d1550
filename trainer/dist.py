"""torchrun's process layout, read in one place.

torchrun sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (and the rendezvous address); a
plain ``python``/``shardline train`` process is rank 0 of 1. The process group is created
here when the world is larger than one (NCCL on CUDA, gloo on CPU) and torn down after.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DistInfo:
        env = os.environ if env is None else env
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        if not 0 <= rank < world:
            raise ValueError(f"RANK={rank} must be within [0, WORLD_SIZE={world})")
        return cls(rank, world, int(env.get("LOCAL_RANK", "0")))


def init(info: DistInfo, device: torch.device) -> bool:
    """Join the process group if needed; True when this call created it."""
    if not info.distributed or dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    log.info("rank %d/%d joined the %s process group", info.rank, info.world, backend)
    return True


def shutdown(created: bool) -> None:
    if created and dist.is_initialized():
        dist.destroy_process_group()


def all_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (a no-op without a process group)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
