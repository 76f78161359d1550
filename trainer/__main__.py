"""``python -m shardline.trainer`` (or under ``torchrun``): train without Prefect.

The same entry point the ``shardline train`` command and the Prefect ``train`` flow call,
for GPU images that carry only the trainer. Rank 0 prints the result; progress goes to
stderr, one line per interval.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from shardline.core.config import StoreSettings, load_config, parse_config
from shardline.core.errors import ShardlineError
from shardline.core.store import ObjectStore
from shardline.trainer.accel import COMPILE_MODES, OPTIMIZERS
from shardline.trainer.dist import DistInfo
from shardline.trainer.options import LR_RULES, LoaderSpec, RunOptions, with_batch_size
from shardline.trainer.run import train


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardline.trainer",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="dataset TOML file (or the JSON of a "
                   "parsed config, as a flow hands it to its ranks)")
    p.add_argument("--dataset-version", "--version", dest="dataset_version", type=int,
                   default=None, help="dataset version (default: latest)")
    p.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: best available)")
    p.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    p.add_argument("--batch-size", type=int, default=None,
                   help="per-rank batch size instead of [train] batch_size; the learning "
                        "rate follows --lr-rule")
    p.add_argument("--lr-rule", choices=LR_RULES, default="sqrt",
                   help="how lr scales with --batch-size (default: sqrt, for AdamW)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="auto",
                   help="AdamW implementation (auto: fused on CUDA, for-loop on the CPU)")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default="auto",
                   help="torch.compile mode (auto: reduce-overhead on one CUDA device, "
                        "max-autotune-no-cudagraphs under DDP, eager on the CPU)")
    p.add_argument("--arena-mb", type=float, default=None,
                   help="shard arena budget in MB of pixels (0: off; default: automatic, "
                        "the keep-open budget shared by the ranks, for small images)")
    args = p.parse_args(argv)
    info = DistInfo.from_env()
    logging.basicConfig(level=logging.INFO if info.is_main else logging.WARNING,
                        stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    options = RunOptions(device=args.device, log_every=args.log_every,
                         optimizer=args.optimizer, compile_mode=args.compile_mode,
                         loader=LoaderSpec(arena_mb=args.arena_mb))
    try:
        cfg = load_config(args.config) if not args.config.endswith(".json") else \
            parse_config(json.loads(Path(args.config).read_text()), args.config)
        if args.batch_size is not None:
            cfg = with_batch_size(cfg, args.batch_size, args.lr_rule)
        result = train(cfg, ObjectStore(StoreSettings.from_env()), args.dataset_version,
                       options=options)
    except ShardlineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if args.json and info.is_main:
            print(json.dumps({"error": str(exc), "type": type(exc).__name__}))
        return 1
    if info.is_main:
        out = result.to_dict() if args.json else {k: v for k, v in result.to_dict().items()
                                                  if not k.startswith("curve")}
        print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
