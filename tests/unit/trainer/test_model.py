from __future__ import annotations

import pytest
import torch

from shardline.core.errors import ConfigError
from shardline.trainer.model import arch, build_model


@pytest.mark.parametrize(("name", "shape"), [("cnn", (8, 8, 1)), ("cnn", (32, 32, 3)),
                                             ("resnet", (32, 32, 3)), ("resnet", (96, 96, 3))])
def test_models_take_uint8_channels_last_batches(name: str, shape: tuple[int, int, int]) -> None:
    h, w, c = shape
    model = build_model(arch(name, 8, 2, shape, 7))
    hwc = torch.randint(0, 256, (4, h, w, c), dtype=torch.uint8)
    x = hwc.permute(0, 3, 1, 2)                      # what the loader yields: a view, no copy
    assert x.is_contiguous(memory_format=torch.channels_last)
    out = model(x)
    assert out.shape == (4, 7) and out.dtype == torch.float32


def test_wider_and_deeper_means_more_parameters() -> None:
    def count(width: int, depth: int) -> int:
        return sum(p.numel() for p in build_model(arch("cnn", width, depth, (8, 8, 1), 10))
                   .parameters())
    assert count(8, 2) < count(16, 2) < count(16, 3)


def test_unknown_model_is_a_config_error_listing_the_choices() -> None:
    with pytest.raises(ConfigError, match="cnn"):
        build_model(arch("vit", 8, 2, (8, 8, 1), 10))
    with pytest.raises(ConfigError, match="positive"):
        build_model(arch("cnn", 0, 2, (8, 8, 1), 10))
