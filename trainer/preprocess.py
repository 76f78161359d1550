"""The module a trained model is used through: it takes the dataset's *raw* fields (what the
loader serves, what a notebook reads) and normalises them on the device before the user's
network sees them, so the trainer, the evaluation and ``shardline.load_model`` all call
the same thing and nobody has to guess the preprocessing.

Normalisation per field (``core.fields``): with recorded statistics (``FieldStats``),
``(x - mean) / std`` per channel (axis 0 of the per-sample shape; one value for a
scalar); without them, uint8 pixels become ``(x / 255 - 0.5) / 0.25`` (what the built-ins
always did), other integer tensors are cast to float, float tensors pass unchanged. A
field with a vocabulary (category indices) is never normalised.

The network is called by the model-call convention: the one field's tensor when the dataset
has one input field, else a dict ``{name: tensor}``. Its weights are saved without this
wrapper (``trainer.model.unwrap``): the statistics travel in the model's ``meta.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from shardline.core.fields import DatasetInfo, FieldInfo


def _scale(f: FieldInfo) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(mean, std) shaped to broadcast over a batch of ``f``, or None: no normalising."""
    if f.vocabulary:
        return None
    view = [1, -1] + [1] * max(len(f.shape) - 1, 0) if f.shape else [1]
    if f.stats is not None and f.stats.mean:
        mean = torch.tensor(f.stats.mean, dtype=torch.float32)
        std = torch.tensor(f.stats.std, dtype=torch.float32).clamp(min=1e-12)
        if len(f.stats.mean) == 1:
            view = [1]
        return mean.reshape(view), std.reshape(view)
    if f.dtype == "uint8":
        return torch.tensor([127.5]), torch.tensor([63.75])
    return None


def _chw(x: torch.Tensor, f: FieldInfo) -> torch.Tensor:
    """An image batch given as stored (N, H, W, C) seen as (N, C, H, W) (a view)."""
    if f.kind == "image" and len(f.shape) == 3 and x.dim() == 4:
        c, h, w = f.shape
        if tuple(x.shape[1:]) == (h, w, c) and tuple(x.shape[1:]) != (c, h, w):
            return x.permute(0, 3, 1, 2)
    return x


def arrow_fields(table: Any, info: DatasetInfo) -> dict[str, torch.Tensor]:
    """The fields of a table of published rows as tensors (images (N, H, W, C), as stored)."""
    import numpy as np
    import pyarrow as pa

    out = {}
    for f in info.fields:
        col = table.column(f.name).combine_chunks()
        if pa.types.is_dictionary(col.type):          # vocabulary strings -> their indices
            pos = {v: i for i, v in enumerate(f.vocabulary)}
            lookup = np.array([pos.get(v, -1) for v in col.dictionary.to_pylist()], np.int64)
            out[f.name] = torch.from_numpy(lookup[col.indices.to_numpy(zero_copy_only=False)])
            continue
        if f.kind == "image" and pa.types.is_fixed_size_binary(col.type):   # legacy bytes
            c, h, w = f.shape
            flat = np.frombuffer(col.buffers()[1], np.dtype(f.dtype), count=len(col) * c * h * w,
                                 offset=col.offset * c * h * w * np.dtype(f.dtype).itemsize)
            arr = flat.reshape(len(col), h, w, c)
        elif hasattr(col, "to_numpy_ndarray"):                        # fixed_shape_tensor
            arr = col.to_numpy_ndarray()
        else:
            arr = col.to_numpy(zero_copy_only=False)
        arr = np.ascontiguousarray(arr)
        out[f.name] = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
    return out


class Preprocessed(nn.Module):
    """``net`` behind the dataset's normalisation; call it with raw fields (a dict of
    tensors: extra keys such as the target or ``key`` are ignored; or the one field's
    tensor). ``predict(batch)`` returns class indices (class / mask targets), 0/1 label
    vectors (multilabel) or values (regression); ``classes`` names the classes."""

    def __init__(self, net: nn.Module, info: DatasetInfo) -> None:
        super().__init__()
        self.net = net
        self.info = info
        self.names = [f.name for f in info.fields]
        for i, f in enumerate(info.fields):
            scale = _scale(f)
            if scale is not None:
                self.register_buffer(f"mean{i}", scale[0], persistent=False)
                self.register_buffer(f"std{i}", scale[1], persistent=False)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.info.target.classes

    def inputs(self, batch: Any) -> torch.Tensor | dict[str, torch.Tensor]:
        """The network's input for ``batch`` (normalised, by the model-call convention).

        ``batch``: a dict of the fields (tensors or numpy arrays; other keys ignored), the
        one field's tensor, or a ``pyarrow.Table`` of published rows (``ds.to_table()``).
        An image field is taken as (C, H, W) per sample, or as stored, (H, W, C)."""
        if hasattr(batch, "column_names"):
            batch = arrow_fields(batch, self.info)
        if not isinstance(batch, Mapping):
            if len(self.names) != 1:
                raise TypeError(f"this model takes fields {self.names}: pass a dict of them")
            batch = {self.names[0]: batch}
        missing = [n for n in self.names if n not in batch]
        if missing:
            raise KeyError(f"the batch has no field(s) {missing}; the model takes {self.names}")
        out = {}
        dev = next(self.net.parameters(), torch.empty(0)).device
        for i, name in enumerate(self.names):
            x = _chw(torch.as_tensor(batch[name]), self.info.fields[i]).to(dev, non_blocking=True)
            mean = getattr(self, f"mean{i}", None)
            if mean is not None:
                x = (x.float() - mean) / getattr(self, f"std{i}")
            elif not self.info.fields[i].vocabulary and not x.is_floating_point() \
                    and x.dtype != torch.bool:
                x = x.float()
            out[name] = x
        return out[self.names[0]] if len(self.names) == 1 else out

    def forward(self, batch: Any) -> torch.Tensor:
        return self.net(self.inputs(batch))

    @torch.no_grad()
    def predict(self, batch: Any) -> torch.Tensor:
        """Predictions for ``batch`` in eval mode (the mode is restored afterwards)."""
        was = self.training
        self.eval()
        try:
            out = self(batch).float()
        finally:
            self.train(was)
        kind = self.info.target.kind
        if kind in ("class", "mask"):
            return out.argmax(1)
        if kind == "multilabel":
            return (out > 0).to(torch.uint8)
        shape = self.info.target.shape
        return out.reshape(len(out), *shape) if shape else out.reshape(len(out))
