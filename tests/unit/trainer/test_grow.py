"""Classes that grow (``trainer.grow``) and per-row results (``trainer.rows``): a wider
head keeps the parent's classes exactly; a removed or reordered class is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardline.trainer.checkpoint import (
    CheckpointError,
    load_model_tensors,
    model_tensors,
    optimizer_parts,
)
from shardline.trainer.grow import ClassListChanged, class_growth, grow_moments, grow_tensors
from shardline.trainer.model import arch, build_model, unwrap
from shardline.trainer.rows import RowScores, rows_from_tensors, rows_tensors
from shardline.trainer.trust import UntrustedInput

OLD = ("a", "b", "c")


def spec(k: int) -> dict[str, object]:
    return arch("cnn", 8, 2, (8, 8, 1), k)


def record(classes: tuple[str, ...]) -> dict[str, object]:
    """The part of a build record (``factory.build_record``) growth reads."""
    return {"factory": "shardline.trainer.model:cnn",
            "target": {"name": "label", "kind": "class", "classes": list(classes)}}


def test_appended_classes_grow_the_head() -> None:
    assert class_growth(record(OLD), record((*OLD, "d", "e")), "m") == (3, (*OLD, "d", "e"))
    assert class_growth(record(OLD), record(OLD), "m") is None            # nothing new
    assert class_growth({"factory": "x"}, record(OLD), "m") is None       # nothing recorded


@pytest.mark.parametrize(("new", "says"), [(("a", "c", "d"), "class 'b' removed"),
                                           (("b", "a", "c", "d"), "position 0 holds 'b'")])
def test_a_removed_or_reordered_class_is_refused_in_one_line(new: tuple[str, ...],
                                                              says: str) -> None:
    with pytest.raises(ClassListChanged) as err:
        class_growth(record(OLD), record(new), "s3://b/models/x/000001/meta.json")
    text = str(err.value)
    assert "\n" not in text and says in text and "appended at the end" in text
    assert "000001/meta.json" in text


def test_parent_classes_are_read_as_untrusted_input() -> None:
    with pytest.raises(UntrustedInput, match="not a list of names"):
        class_growth({"target": {"classes": "ab"}}, record(OLD), "m")


def test_grown_model_predicts_the_old_classes_exactly_like_the_parent() -> None:
    torch.manual_seed(0)
    parent = build_model(spec(3)).eval()
    child = build_model(spec(5)).eval()
    grown = grow_tensors(child, model_tensors(parent), 3, "m")
    load_model_tensors(child, grown, "m")
    x = torch.randint(0, 256, (16, 1, 8, 8), dtype=torch.uint8)
    with torch.no_grad():
        a, b = parent(x), child(x)
    assert b.shape == (16, 5)
    # the parent's tensors are loaded bit for bit; its outputs agree to rounding only (a
    # 3-wide and a 5-wide matmul may take different CPU kernels: found bitwise-different
    # on another machine's CPU)
    for k, v in model_tensors(parent).items():
        got = model_tensors(child)[k]
        assert torch.equal(v, got[:v.shape[0]] if got.shape != v.shape else got), k
    assert torch.allclose(a, b[:, :3], rtol=0, atol=1e-6)
    assert torch.equal(a.argmax(1), b[:, :3].argmax(1))
    # the new classes' rows are the fresh model's initialisation, not zeros
    assert model_tensors(child)["head.2.weight"][3:].abs().sum() > 0


def test_a_tensor_that_changed_otherwise_is_refused() -> None:
    child = build_model(spec(5))
    tensors = model_tensors(build_model(spec(3)))
    tensors["head.2.weight"] = torch.zeros(3, 7)
    with pytest.raises(CheckpointError, match="only the class dimension"):
        grow_tensors(child, tensors, 3, "m")


def test_a_model_hook_replaces_the_rule() -> None:
    child = build_model(spec(5))
    seen = {}

    def hook(state: dict[str, torch.Tensor], old: int) -> dict[str, torch.Tensor]:
        seen["old"] = old
        return model_tensors(child)

    unwrap(child).grow_classes = hook  # type: ignore[assignment]
    out = grow_tensors(child, model_tensors(build_model(spec(3))), 3, "m")
    assert seen == {"old": 3} and out["head.2.weight"].shape == (5, 4 * 16)


def test_adamw_moments_grow_with_zeros_for_new_classes() -> None:
    parent = build_model(spec(3))
    opt = torch.optim.AdamW(parent.parameters(), lr=1e-3)
    parent(torch.zeros(2, 1, 8, 8, dtype=torch.uint8)).sum().backward()
    opt.step()
    tensors, rest = optimizer_parts(opt)
    child = build_model(spec(5))
    child_opt = torch.optim.AdamW(child.parameters(), lr=1e-3)
    grown = grow_moments(child_opt, tensors, rest, 3)
    heads = [k for k, v in grown.items() if v.dim() > 0 and v.shape[0] == 5]
    assert heads, "the head's moments grew"
    for k in heads:
        assert torch.equal(grown[k][:3], tensors[k]) and not grown[k][3:].any()


def test_rows_round_trip_and_refuse_a_bad_file() -> None:
    r = RowScores(np.array([3, 2**63 + 5], np.uint64), np.array([1, 0], np.float32),
                  np.array([1, 2], np.int32), np.array([4, -1], np.int64))
    back = RowScores.from_bytes(r.to_bytes(), "m")
    assert back.ids.tolist() == r.ids.tolist() and back.scores.tolist() == [1.0, 0.0]
    t = rows_tensors(r, "before.")
    assert rows_from_tensors(t, "before.", "m") is not None
    assert rows_from_tensors({"model.w": torch.zeros(1)}, "before.", "m") is None
    t["before.scores"] = torch.zeros(3)
    with pytest.raises(UntrustedInput, match="one length"):
        rows_from_tensors(t, "before.", "m")
    with pytest.raises(UntrustedInput, match="not a safetensors"):
        RowScores.from_bytes(b"junk-bytes-here", "m")
