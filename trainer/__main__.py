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

from shardline.core.config import StoreSettings, load_config
from shardline.core.errors import ShardlineError
from shardline.core.store import ObjectStore
from shardline.trainer.dist import DistInfo
from shardline.trainer.options import RunOptions
from shardline.trainer.run import train


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shardline.trainer",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="dataset TOML file")
    p.add_argument("--dataset-version", "--version", dest="dataset_version", type=int,
                   default=None, help="dataset version (default: latest)")
    p.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: best available)")
    p.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    args = p.parse_args(argv)
    info = DistInfo.from_env()
    logging.basicConfig(level=logging.INFO if info.is_main else logging.WARNING,
                        stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    try:
        result = train(load_config(args.config), ObjectStore(StoreSettings.from_env()),
                       args.dataset_version, options=RunOptions(device=args.device,
                                                        log_every=args.log_every))
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
