"""One torchrun rank of the distributed-training test: trains through ``trainer.run.train``
(gloo on CPU, DDP) and records the keys and size of every batch it was given.

usage: torchrun --standalone --nproc-per-node 2 train_rank_worker.py CONFIG OUT_DIR
(store settings come from SHARDLINE_* / AWS_* in the environment)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from shardline.core.config import StoreSettings, load_config
from shardline.core.store import ObjectStore
from shardline.trainer.options import RunOptions
from shardline.trainer.run import train


def main() -> None:
    config, out = sys.argv[1], Path(sys.argv[2])
    batches: list[dict[str, object]] = []
    result = train(load_config(config), ObjectStore(StoreSettings.from_env()),
                   options=RunOptions(log_every=5),
                   on_batch=lambda step, b: batches.append({"epoch": b["epoch"],
                                                             "keys": b["key"].tolist()}))
    rank = int(os.environ["RANK"])
    (out / f"rank{rank}.json").write_text(json.dumps({"batches": batches,
                                                      "result": result.to_dict()}))


if __name__ == "__main__":
    main()
