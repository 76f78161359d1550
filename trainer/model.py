"""The built-in models, as factories of the same kind as a user's (``trainer.factory``).

A factory is ``factory(info: DatasetInfo, **args) -> nn.Module``: a small CNN (``cnn``, the
default) and a ResNet-style network (``resnet``) for one image or (C, H, W) tensor field of
any channel count, and an MLP (``mlp``) over any set of tensor and scalar fields. They take
float input: the trainer's wrapper (``trainer.preprocess``) normalises the raw fields on the
device first (the first layer the built-ins used to carry, ``Normalize``, is an identity kept
so the weights' names stay those of earlier models). Output: one logit per class
(class / multilabel targets) or one value per regression output.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from shardline.core.errors import ConfigError
from shardline.core.fields import DatasetInfo, FieldInfo

MODELS = ("cnn", "resnet", "mlp")
# What a built-in may be built with (from the config, or a promoted model's args read back
# from its meta.json to evaluate it): a tampered value must not allocate without bound. The
# widest layer has width * 2**(depth-1) channels; 4,096 is 8x ResNet-18's widest.
LIMITS = {"width": 1024, "depth": 8, "widest": 4096, "classes": 100_000, "side": 4096,
          "channels": 1024, "features": 1_000_000}


class Normalize(nn.Identity):
    """Kept as the built-ins' first layer so weight names stay stable; normalising is the
    wrapper's (``trainer.preprocess.Preprocessed``)."""


def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class SmallCNN(nn.Module):
    """``depth`` conv blocks (width doubling); each block but the first halves H and W.

    The head pools to 2x2 (not 1x1) before the linear layer: keeping a little layout is
    what lets a two-block network tell digits apart (measured on digits, 2 epochs: 96 % vs
    83 % with global average pooling at width 32)."""

    def __init__(self, channels: int, classes: int, width: int = 32, depth: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = [Normalize()]
        cin = channels
        for i in range(depth):
            cout = width * 2 ** i
            layers.append(_conv_bn(cin, cout, stride=1 if i == 0 else 2))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                                  nn.Linear(4 * cin, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


class ResNetStyle(nn.Module):
    """Stem + ``depth`` stages of two basic blocks. Images of 64 px and more get a strided
    stem and a max-pool (ImageNet-style); small images keep full resolution in the stem."""

    def __init__(self, channels: int, classes: int, image_hw: tuple[int, int], width: int = 32,
                 depth: int = 3) -> None:
        super().__init__()
        large = min(image_hw) >= 64
        stem: list[nn.Module] = [Normalize(), _conv_bn(channels, width, stride=2 if large else 1)]
        if large:
            stem.append(nn.MaxPool2d(3, 2, 1))
        stages: list[nn.Module] = []
        cin = width
        for i in range(depth):
            cout = width * 2 ** i
            stride = 1 if i == 0 else 2
            stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*stem, *stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class MLP(nn.Module):
    """Every field flattened and concatenated (a string field with a vocabulary one-hot
    encoded), then ``depth`` hidden layers of ``hidden`` units (ReLU, dropout)."""

    def __init__(self, fields: tuple[FieldInfo, ...], outputs: int, hidden: int = 256,
                 depth: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.names = [f.name for f in fields]
        self.vocab = {f.name: len(f.vocabulary) for f in fields if f.vocabulary}
        n_in = sum(self.vocab.get(f.name) or _numel(f.shape) for f in fields)
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(n_in, hidden), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            n_in = hidden
        self.body = nn.Sequential(*layers, nn.Linear(n_in, outputs))

    def forward(self, x: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        parts = x if isinstance(x, dict) else {self.names[0]: x}
        flat = []
        for name in self.names:
            v = parts[name]
            if name in self.vocab:
                v = nn.functional.one_hot(v.long(), self.vocab[name])
            flat.append(v.float().reshape(len(v), -1))
        return self.body(torch.cat(flat, 1))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _check(name: str, width: int, depth: int, classes: int, shape: tuple[int, ...]) -> None:
    problem = None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (width, depth)):
        problem = f"width and depth must be integers, got {width!r}, {depth!r}"
    elif not (0 < width <= LIMITS["width"] and 0 < depth <= LIMITS["depth"]
              and width * 2 ** (depth - 1) <= LIMITS["widest"]):
        problem = (f"width {width} and depth {depth} must be positive, at most "
                   f"{LIMITS['width']} and {LIMITS['depth']}, with width * 2**(depth-1) at "
                   f"most {LIMITS['widest']}")
    elif not 0 < classes <= LIMITS["classes"]:
        problem = f"{classes} classes (outputs): 1 to {LIMITS['classes']}"
    elif name != "mlp" and not (0 < shape[0] <= LIMITS["channels"]
                                and min(shape[1:]) > 0 and max(shape[1:]) <= LIMITS["side"]):
        problem = (f"input (C, H, W) {list(shape)}: at most {LIMITS['channels']} channels "
                   f"and {LIMITS['side']} px a side")
    elif name == "mlp" and _numel(shape) > LIMITS["features"]:
        problem = f"{_numel(shape)} input features: at most {LIMITS['features']}"
    if problem:
        raise ConfigError(f"train: cannot build {name!r}: {problem}; change [train] (or the "
                          "dataset's fields) within the limits")


def _image_field(info: DatasetInfo, name: str) -> FieldInfo:
    """The one (C, H, W) input of a convolutional built-in (a 2-D tensor gets C = 1)."""
    f = info.fields[0] if len(info.fields) == 1 else None
    if f is None or len(f.shape) not in (2, 3) or info.target.kind == "mask":
        raise ConfigError(
            f"train: model {name!r} takes one image or (C, H, W) tensor field and a class, "
            f"multilabel or regression target; this dataset has fields "
            f"{[(g.name, list(g.shape)) for g in info.fields]} and a {info.target.kind} "
            "target: use model = \"mlp\" or your own factory (model = \"package.module:fn\")")
    return f


def _chw(f: FieldInfo) -> tuple[int, int, int]:
    return (1, *f.shape) if len(f.shape) == 2 else (f.shape[0], f.shape[1], f.shape[2])


class _Channels(nn.Module):
    """A 2-D field (H, W) seen as one channel."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.unsqueeze(1))


def cnn(info: DatasetInfo, width: int = 32, depth: int = 2) -> nn.Module:
    """The small CNN (:class:`SmallCNN`) for the dataset's one image / (C, H, W) field."""
    f = _image_field(info, "cnn")
    c, h, w = _chw(f)
    _check("cnn", width, depth, info.target.num_outputs, (c, h, w))
    net = SmallCNN(c, info.target.num_outputs, width, depth)
    return _Channels(net) if len(f.shape) == 2 else net


def resnet(info: DatasetInfo, width: int = 32, depth: int = 3) -> nn.Module:
    """The ResNet-style network (:class:`ResNetStyle`) for the one image / (C, H, W) field."""
    f = _image_field(info, "resnet")
    c, h, w = _chw(f)
    _check("resnet", width, depth, info.target.num_outputs, (c, h, w))
    net = ResNetStyle(c, info.target.num_outputs, (h, w), width, depth)
    return _Channels(net) if len(f.shape) == 2 else net


def mlp(info: DatasetInfo, hidden: int = 256, depth: int = 2, dropout: float = 0.1
        ) -> nn.Module:
    """The MLP (:class:`MLP`) over every field: tabular features, vectors, small tensors."""
    if info.target.kind == "mask":
        raise ConfigError("train: model 'mlp' does not predict a mask target; bring your own "
                          "model (model = \"package.module:fn\")")
    n_in = sum(len(f.vocabulary) or _numel(f.shape) for f in info.fields)
    _check("mlp", hidden, depth, info.target.num_outputs, (n_in,))
    return MLP(info.fields, info.target.num_outputs, hidden, depth, dropout)


def arch(model: str, width: int, depth: int, shape: tuple[int, ...],
         classes: int) -> dict[str, Any]:
    """A built-in for uint8 images of ``shape`` (H, W, C) and ``classes`` classes, as a
    plain description (benchmarks and tests build one with :func:`build_model`)."""
    return {"model": model, "width": width, "depth": depth, "shape": list(shape),
            "classes": classes}


def build_model(spec: dict[str, Any]) -> nn.Module:
    """The built-in an :func:`arch` description names, behind the trainer's preprocessing
    (``trainer.preprocess``): it takes raw uint8 [B, C, H, W] batches.

    Raises:
        ConfigError: not a convolutional built-in, or sizes outside :data:`LIMITS`."""
    from shardline.core.fields import TargetInfo
    from shardline.trainer.preprocess import Preprocessed

    name, shape = spec.get("model"), spec.get("shape")
    if name not in ("cnn", "resnet") or not isinstance(shape, list | tuple) or len(shape) != 3:
        raise ConfigError(f"train: model must be one of ['cnn', 'resnet'] with shape [H, W, C], "
                          f"got {name!r}, {shape!r}")
    classes = spec.get("classes")
    if not isinstance(classes, int) or not 0 < classes <= LIMITS["classes"]:
        raise ConfigError(f"train: cannot build {name!r}: {classes!r} classes (outputs): 1 to "
                          f"{LIMITS['classes']}")
    h, w, c = shape
    info = DatasetInfo((FieldInfo("image", "image", "uint8", (c, h, w)),),
                       TargetInfo("label", "class", tuple(str(i) for i in range(classes))))
    factory = cnn if name == "cnn" else resnet
    return Preprocessed(factory(info, width=spec.get("width", 0), depth=spec.get("depth", 0)),
                        info)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module behind DDP, torch.compile and the trainer's preprocessing wrapper:
    the module whose weights are saved."""
    from shardline.trainer.preprocess import Preprocessed

    inner = getattr(model, "module", model)
    inner = getattr(inner, "_orig_mod", inner)
    return inner.net if isinstance(inner, Preprocessed) else inner
