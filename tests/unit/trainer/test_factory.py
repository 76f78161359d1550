"""Model factories: the built-ins take any channel count, float input, 2-D fields and
tabular fields, and emit one output per class or regression value; a user factory is found by
its import path (errors name the path and the fix); the build record and its differences
(one line per parameter); the preprocessing wrapper normalises raw fields."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from shardline.core.config import TrainConfig
from shardline.core.errors import ConfigError
from shardline.core.fields import DatasetInfo, FieldInfo, FieldStats, TargetInfo
from shardline.trainer import model as builtins
from shardline.trainer.factory import build, build_record, differences, resolve
from shardline.trainer.preprocess import Preprocessed

CLASSES = tuple("abcd")


def info(*fields: FieldInfo, target: TargetInfo | None = None) -> DatasetInfo:
    return DatasetInfo(fields, target or TargetInfo("label", "class", CLASSES))


@pytest.mark.parametrize("name", ["cnn", "resnet"])
@pytest.mark.parametrize(("dtype", "shape"), [("float32", (13, 16, 16)), ("uint16", (2, 8, 8)),
                                              ("float32", (12, 12))])
def test_conv_builtins_take_any_channels_and_float(name: str, dtype: str,
                                                   shape: tuple[int, ...]) -> None:
    data = info(FieldInfo("tile", "tensor", dtype, shape))
    model = Preprocessed(getattr(builtins, name)(data, width=8, depth=2), data)
    raw = torch.rand(3, *shape) * (1000 if dtype == "uint16" else 1)
    raw = raw.to(torch.int32 if dtype == "uint16" else torch.float32)
    out = model({"tile": raw, "label": torch.zeros(3)})          # extra keys are ignored
    assert out.shape == (3, 4) and out.dtype == torch.float32
    assert model.predict(raw).shape == (3,) and model.classes == CLASSES


def test_mlp_over_tabular_fields_for_each_target_kind() -> None:
    fields = (FieldInfo("age", "scalar", "float32", ()), FieldInfo("bmi", "scalar", "float32", ()),
              FieldInfo("vec", "tensor", "float32", (5,)),
              FieldInfo("city", "scalar", "string", (), vocabulary=("a", "b", "c")))
    batch = {"age": torch.rand(6), "bmi": torch.rand(6), "vec": torch.rand(6, 5),
             "city": torch.tensor([0, 1, 2, 0, 1, 2])}
    for target, shape in [(TargetInfo("y", "regression"), (6,)),
                          (TargetInfo("y", "regression", shape=(3,)), (6, 3)),
                          (TargetInfo("t", "multilabel", CLASSES, (4,)), (6, 4)),
                          (TargetInfo("label", "class", CLASSES), (6,))]:
        data = info(*fields, target=target)
        model = Preprocessed(builtins.mlp(data, hidden=16), data)
        assert model.predict(batch).shape == shape
    with pytest.raises(ConfigError, match="mask"):
        builtins.mlp(info(*fields, target=TargetInfo("m", "mask", CLASSES, (4, 4))))
    with pytest.raises(ConfigError, match="mlp"):     # a conv net refuses tabular fields
        builtins.cnn(info(*fields))


def test_uint8_without_stats_is_normalised_as_the_builtins_always_did() -> None:
    # Every pixel value once, and seeded floats: the result is compared with a float32
    # tolerance (the wrapper multiplies by 1/255 where the reference divides, which differs
    # in the last bit next to zero: allclose's default atol of 1e-8 made this flaky).
    gen = torch.Generator().manual_seed(0)
    data = info(FieldInfo("image", "image", "uint8", (1, 4, 4)))
    x = torch.arange(256, dtype=torch.uint8).reshape(16, 1, 4, 4)
    got = Preprocessed(torch.nn.Identity(), data).inputs(x)
    assert torch.allclose(got, (x.float() / 255 - 0.5) * 4, atol=1e-5)
    stats = FieldStats(mean=(10.0, 20.0), std=(2.0, 4.0))
    data = info(FieldInfo("t", "tensor", "float32", (2, 3), stats=stats))
    x = torch.rand(5, 2, 3, generator=gen) * 30
    got = Preprocessed(torch.nn.Identity(), data).inputs(x)
    assert torch.allclose(got[:, 0], (x[:, 0] - 10) / 2, atol=1e-5)
    assert torch.allclose(got[:, 1], (x[:, 1] - 20) / 4, atol=1e-5)


def _package(tmp_path: Path, body: str) -> str:
    pkg = tmp_path / "factpkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("__version__ = '0.3'\n")
    (pkg / "nets.py").write_text(textwrap.dedent(body))
    sys.path.insert(0, str(tmp_path))
    return "factpkg.nets"


def test_a_user_factory_by_import_path(tmp_path: Path) -> None:
    mod = _package(tmp_path, """
        from torch import nn
        def tiny(info, hidden=8):
            f = info.fields[0]
            return nn.Sequential(nn.Flatten(), nn.Linear(f.shape[0] * f.shape[1] * f.shape[2],
                                 info.target.num_outputs))
        def not_a_module(info):
            return 3
        VALUE = 1
        """)
    try:
        data = info(FieldInfo("image", "image", "uint8", (1, 8, 8)))
        train = TrainConfig(model=f"{mod}:tiny", model_args={"hidden": 4})
        net = build(train, data)
        assert isinstance(net, torch.nn.Module)
        rec = build_record(train, data)
        assert rec["factory"] == f"{mod}:tiny" and rec["args"] == {"hidden": 4}
        assert rec["package"] == "factpkg" and rec["version"] == "0.3"
        assert len(rec["source_sha256"]) == 64
        assert differences(rec, rec) == []
        other = build_record(TrainConfig(model="cnn"), data)
        line = "; ".join(differences(rec, other))
        assert f"factory: {mod}:tiny -> shardline.trainer.model:cnn" in line
        assert "args.hidden: 4 -> None" in line and "args.width: None -> 32" in line
        grown = build_record(train, info(FieldInfo("image", "image", "uint8", (1, 8, 8)),
                                         target=TargetInfo("label", "class", CLASSES + ("e",))))
        assert differences(rec, grown) == []           # appended classes: class growth
        assert differences(None, rec) == [f"factory: (not recorded) -> {mod}:tiny"]
        with pytest.raises(ConfigError, match="not a torch.nn.Module"):
            build(TrainConfig(model=f"{mod}:not_a_module"), data)
        with pytest.raises(ConfigError, match="refused its arguments"):
            build(TrainConfig(model=f"{mod}:tiny", model_args={"nope": 1}), data)
        with pytest.raises(ConfigError, match="no callable 'VALUE'"):
            resolve(f"{mod}:VALUE")
        with pytest.raises(ConfigError, match="cannot be imported.*install the package"):
            resolve("no_such_pkg.nets:tiny")
    finally:
        sys.path.remove(str(tmp_path))
        for m in [m for m in sys.modules if m.startswith("factpkg")]:
            del sys.modules[m]


def test_config_accepts_import_paths_and_names_the_registry_folder() -> None:
    assert TrainConfig().registry_name == "cnn"
    assert TrainConfig(model="mlp").registry_name == "mlp"
    assert TrainConfig(model="acme.vision.nets:resnet50").registry_name == "resnet50"
    assert TrainConfig(model="acme.nets:x", name="prod-vision").registry_name == "prod-vision"
    for bad in ("vit", "acme.nets", "acme nets:x", "acme.nets:x()"):
        with pytest.raises(ValueError, match="import path"):
            TrainConfig(model=bad)
    with pytest.raises(ValueError, match="not an import path"):
        TrainConfig(step="losses.dice")
