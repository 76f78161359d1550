"""torchrun with two CPU processes (gloo, DDP) against the moto server: ranks get disjoint
samples and the same number of equally sized batches (no DDP hang), and one model is
published. CUDA/NCCL is not needed; the GPU-only paths are tested in test_train_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from shardline.core.config import StoreSettings
from shardline.core.store import ObjectStore
from shardline.infra.procs import free_port
from shardline.trainer.registry import ModelRegistry
from tests.integration.trainer_data import config_toml, digits_config, publish_version

ROOT = Path(__file__).resolve().parents[2]


def test_two_gloo_ranks_split_samples_with_equal_batch_counts(
        store: ObjectStore, store_settings: StoreSettings, tmp_path: Path) -> None:
    cfg = digits_config(epochs=2, batch_size=32, width=8, cache_dir=str(tmp_path / "cache"))
    publish_version(store, cfg.dataset, np.random.default_rng(5).permutation(1797)[:800])
    config = tmp_path / "digits.toml"
    config.write_text(config_toml(cfg))
    env = {**os.environ, "SHARDLINE_BUCKET": store_settings.bucket,
           "SHARDLINE_S3_ENDPOINT_URL": store_settings.endpoint_url or "",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
           "2", "--rdzv-backend", "c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
           str(Path(__file__).with_name("train_rank_worker.py")), str(config), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    sizes = [[len(b["keys"]) for b in r["batches"]] for r in ranks]
    assert sizes[0] == sizes[1] and len(sizes[0]) > 10          # same steps, same shapes
    for epoch in (0, 1):
        keys = [[k for b in r["batches"] if b["epoch"] == epoch for k in b["keys"]]
                for r in ranks]
        assert len(keys[0]) == len(set(keys[0])) == len(keys[1]) == len(set(keys[1]))
        assert not set(keys[0]) & set(keys[1])                   # disjoint within the epoch
    results = [r["result"] for r in ranks]
    assert results[0]["model_version"] == results[1]["model_version"] == 1
    assert results[0]["samples_seen"] == 2 * sum(sizes[0])       # counted over both ranks
    assert results[0]["eval_accuracy"] == results[1]["eval_accuracy"]   # all-reduced
    assert ModelRegistry(store, "digits", "cnn").numbers() == [1]       # rank 0 published once
