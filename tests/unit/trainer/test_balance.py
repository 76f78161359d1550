"""The corrections of a class-incremental update: the loss's prior shift
(``trainer.balance``) and the parent's answers distilled (``trainer.distill``).

The last test trains a real (small) network through the trainer's own step
(``trainer.loop.make_step``) on a seeded class-incremental stream: the parent knows eight
classes, the update brings two new ones whole and the old ones only through a small replay
sample. With the corrections the old classes keep more of their accuracy than with plain
cross-entropy on the same stream; it fails if either correction is removed from the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shardline.bench.learning_data import Patterns
from shardline.core.builder import build_version
from shardline.core.fields import DatasetInfo, FieldInfo, TargetInfo
from shardline.core.manifest import Manifest
from shardline.core.parts import ValidationSummary
from shardline.trainer.balance import align_new_classes, class_priors, logit_shift, prior_shift
from shardline.trainer.distill import Distill
from shardline.trainer.loop import Step, make_step
from shardline.trainer.objectives import objective
from shardline.trainer.plan import make_plan
from tests.unit.manifest_fixtures import PREFIX, SCHEMA, new_batch, shard

OK = ValidationSummary(success=True, suites=["toy.batch"])


def _version(parent: Manifest | None, i: int, rows_by_label: dict[int, int]) -> Manifest:
    b = new_batch(i)
    shards = [dataclasses.replace(shard(b.id, p, rows=n, label=lab), split="train",
                                  label_counts={str(lab): n})
              for p, (lab, n) in enumerate(rows_by_label.items())]
    return build_version(PREFIX, dataset="toy", schema=SCHEMA, config={}, parent=parent,
                         batch=dataclasses.replace(b, shards=shards), validation=OK,
                         holdout_fraction=0.2).manifest()


def test_an_update_reads_another_class_mix_than_the_data_has() -> None:
    v1 = _version(None, 1, {0: 400, 1: 400})
    v2 = _version(v1, 2, {2: 300})
    plan = make_plan(v2, 1, 0.25, None, seed=0)
    stream, data = class_priors(v2.shard_columns, plan, 4)   # class 3: no rows at all
    assert data.tolist() == [400, 400, 300, 0]
    assert stream[2] == 300 and stream[3] == 0
    assert stream[:2].sum() == pytest.approx(0.25 / 0.75 * 300)   # the replay budget
    shift = logit_shift(v2.shard_columns, plan, 4)
    assert shift is not None
    # the stream over-represents the new class and under-represents the replayed ones
    assert shift[2] > 0 > shift[0] and shift[0] == pytest.approx(float(shift[1]))
    assert float(shift[3]) == pytest.approx(0.0, abs=1e-6)   # no rows at all: neutral


def test_a_full_retrain_has_nothing_to_correct() -> None:
    v2 = _version(_version(None, 1, {0: 400, 1: 100}), 2, {2: 300})
    plan = make_plan(v2, None, 0.25, None, seed=0)
    stream, data = class_priors(v2.shard_columns, plan, 3)
    assert stream.tolist() == data.tolist()
    assert prior_shift(stream, data) is None
    assert logit_shift(v2.shard_columns, plan, 3) is None


def test_the_shift_enters_the_loss_only() -> None:
    info = DatasetInfo((FieldInfo("image", "image", "uint8", ()),),
                       TargetInfo("label", "class", ("a", "b", "c")))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    batch = {"image": torch.randn(8, 4), "label": torch.randint(0, 3, (8,))}
    shift = torch.tensor([0.5, -1.0, 0.0])
    model = _Fields(net)
    plain = make_step(info, objective(info.target))(model, batch)
    moved = make_step(info, objective(info.target), shift=shift)(model, batch)
    with torch.no_grad():
        out = net(batch["image"])
        y = batch["label"]
        assert float(plain[0].detach()) == pytest.approx(float(F.cross_entropy(out, y)))
        assert float(moved[0].detach()) == pytest.approx(float(F.cross_entropy(out + shift, y)))
    assert float(moved[2]) == float(plain[2])          # training accuracy: the model as is


class _Fields(nn.Module):
    """A network called the trainer's way: with the batch's fields by name."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, fields: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.net(fields["image"])


def test_distillation_is_zero_where_the_model_still_answers_like_its_parent() -> None:
    torch.manual_seed(0)
    model = _Fields(nn.Linear(4, 3))
    keep = Distill.of(model, 2, 1.0)
    frozen = keep.teacher
    assert frozen is not model and not frozen.training
    assert all(not p.requires_grad for p in frozen.parameters())
    x = {"image": torch.randn(16, 4)}
    same = model(x)
    assert float(keep.loss(same, x).detach()) == pytest.approx(0.0, abs=1e-6)
    wider = torch.cat([same, torch.randn(16, 1) * 5], 1)  # a new class's output is not asked
    assert float(keep.loss(wider, x).detach()) == pytest.approx(0.0, abs=1e-6)
    assert float(keep.loss(same.flip(1), x).detach()) > 0.01
    loss = keep.loss(same.flip(1), x)
    loss.backward()                                       # the gradient reaches the model only
    assert model.net.weight.grad is not None
    assert all(p.grad is None for p in frozen.parameters())


def test_weight_aligning_gives_the_new_classes_the_old_ones_mean_norm() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4))   # 4 classes, 2 old
    head = net[2]
    with torch.no_grad():
        head.weight[2:] *= 3.0                  # the new classes' rows grew large
        head.bias.copy_(torch.tensor([0.1, -0.1, 0.6, 0.3]))
    old_rows, new_bias = head.weight[:2].clone(), head.bias[2:].clone()
    norms = head.weight.detach().norm(dim=1)
    expected = float(norms[:2].mean() / norms[2:].mean())
    assert align_new_classes(_Fields(net), 2, 4) == pytest.approx(expected)
    after = head.weight.detach().norm(dim=1)
    assert float(after[2:].mean()) == pytest.approx(float(after[:2].mean()), rel=1e-5)
    assert torch.equal(head.weight[:2], old_rows)                    # the old rows as they were
    assert torch.allclose(head.bias[2:], new_bias * expected)
    assert align_new_classes(_Fields(net), 0, 4) is None             # nothing old to align to
    assert align_new_classes(_Fields(nn.Linear(6, 3)), 2, 4) is None  # no layer of 4 outputs


# -- the outcome on a seeded class-incremental stream ---------------------------------------
OLD, NEW, SIDE = 8, 10, 16 * 16 * 3


class _Net(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(SIDE, 64), nn.ReLU())
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body((x.float() - 128) / 64))


def _data(per_class: int, salt: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = np.repeat(np.arange(NEW, dtype=np.int64), per_class)
    images = Patterns(seed=3, drift=0.0, noise=5.0).sample(labels, 0.0, salt=salt)
    return torch.from_numpy(images), torch.from_numpy(labels)


def _info(classes: int) -> DatasetInfo:
    return DatasetInfo((FieldInfo("image", "image", "uint8", ()),),
                       TargetInfo("label", "class", tuple(map(str, range(classes)))))


def _fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, step: Step) -> None:
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(32):
            loss = step(model, {"image": x[idx], "label": y[idx]})[0]
            opt.zero_grad()
            loss.backward()
            opt.step()


def _update(parent: _Net, x: torch.Tensor, y: torch.Tensor, corrected: bool) -> float:
    """The parent grown to ``NEW`` classes (its rows copied, as ``trainer.grow`` does) and
    trained on the update's rows; returns the old classes' accuracy on fresh rows."""
    torch.manual_seed(2)
    net = _Net(NEW)
    grown = net.state_dict()
    for k, v in parent.state_dict().items():
        grown[k][:len(v)] = v
    net.load_state_dict(grown)
    model = _Fields(net)
    stream = np.bincount(y.numpy(), minlength=NEW).astype(np.float64)
    shift = prior_shift(stream, np.full(NEW, 100.0))   # the data holds every class alike
    assert shift is not None
    step = make_step(_info(NEW), objective(_info(NEW).target),
                     shift=torch.from_numpy(shift.astype(np.float32)) if corrected else None,
                     keep=Distill.of(model, OLD, 1.0) if corrected else None)
    _fit(model, x, y, 3, step)
    test_x, test_y = _data(40, salt=99)
    with torch.no_grad():
        pred = net(test_x).argmax(1)
    old = test_y < OLD
    return float((pred[old] == test_y[old]).float().mean())


@pytest.fixture
def one_thread() -> Iterator[None]:
    """A tiny network steps faster on one thread than on threads fighting a busy machine."""
    was = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(was)


@pytest.mark.usefixtures("one_thread")
def test_corrections_keep_the_old_classes_after_classes_grow() -> None:
    x, y = _data(50, salt=1)
    torch.manual_seed(0)
    parent = _Net(OLD)
    first = y < OLD
    _fit(_Fields(parent), x[first], y[first], 3,
         make_step(_info(OLD), objective(_info(OLD).target)))
    # the update: the two new classes whole, the old ones through 10 rows each
    rows = np.concatenate([np.flatnonzero(~first.numpy())]
                          + [np.flatnonzero(y.numpy() == c)[:10] for c in range(OLD)])
    plain = _update(parent, x[rows], y[rows], corrected=False)
    corrected = _update(parent, x[rows], y[rows], corrected=True)
    assert corrected > plain + 0.10, (plain, corrected)
