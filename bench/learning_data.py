"""Synthetic image data for the learning benchmarks: noisy 16x16x3 class patterns.

Each class has a smooth random prototype (a 4x4x3 pattern upsampled to 16x16x3); a row is
its class's prototype, moved along a per-class drift direction by the upload's drift, plus
Gaussian noise, as uint8 pixels. ``noise`` sets how hard it is (at 6, a width-16 CNN reaches
about 99 % on 8 uploads of 600 rows; at 8 the classes scenario is harder). Every row has a
unique id; the same seed gives the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIDE, CHANNELS = 16, 3


@dataclass(frozen=True)
class Patterns:
    classes: int = 10
    noise: float = 6.0
    drift: float = 1.0          # prototype shift from the first upload to the last
    seed: int = 0

    def _protos(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        coarse = rng.normal(0, 1, (self.classes, 4, 4, CHANNELS))
        towards = rng.normal(0, 1, (self.classes, 4, 4, CHANNELS))
        up = np.ones((1, 4, 4, 1))
        return np.kron(coarse, up), np.kron(towards, up)

    def sample(self, labels: np.ndarray, phase: float, salt: int) -> np.ndarray:
        """uint8 [n, 16*16*3] rows of ``labels`` at drift ``phase`` (0..1)."""
        base, towards = self._protos()
        rng = np.random.default_rng([self.seed, salt])
        x = base[labels] + self.drift * phase * towards[labels]
        x = x + rng.normal(0, self.noise, x.shape)
        return np.clip(np.rint(128 + 12 * x), 0, 255).astype(np.uint8).reshape(len(labels), -1)


def drift_mix(uploads: int, classes: int = 10, width: float = 2.5) -> np.ndarray:
    """P(class | upload) [uploads, classes]: early uploads favour low classes, late ones
    high classes (as the digits benchmark does), every class always a little present."""
    centers = np.linspace(0, classes - 1, uploads)
    w = np.exp(-((np.arange(classes)[None, :] - centers[:, None]) ** 2) / (2 * width ** 2))
    w = w + 0.05
    return w / w.sum(1, keepdims=True)


def drifting_uploads(gen: Patterns, uploads: int, rows: int, seed: int
                     ) -> tuple[list[str], np.ndarray, np.ndarray, list[np.ndarray]]:
    """(ids, labels, images, row indices per upload) of ``uploads`` uploads of ``rows``
    each, class mix and appearance drifting from the first to the last."""
    rng = np.random.default_rng([seed, 7])
    mix = drift_mix(uploads, gen.classes)
    labels, images, parts = [], [], []
    for u in range(uploads):
        lab = rng.choice(gen.classes, size=rows, p=mix[u]).astype(np.int16)
        labels.append(lab)
        images.append(gen.sample(lab, u / max(uploads - 1, 1), salt=seed * 1000 + u))
        parts.append(np.arange(u * rows, (u + 1) * rows))
    ids = [f"s{seed}-r{i:07d}" for i in range(uploads * rows)]
    return ids, np.concatenate(labels), np.concatenate(images), parts


def oracle_set(gen: Patterns, uploads_so_far: int, uploads: int, rows: int, seed: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """A large fresh sample (labels, images) of the data *as it is* after
    ``uploads_so_far`` uploads (every upload so far, equally): the truth the gate's
    held-out rows estimate."""
    rng = np.random.default_rng([seed, 99, uploads_so_far])
    mix = drift_mix(uploads, gen.classes)
    labs, ims = [], []
    for u in range(uploads_so_far):
        lab = rng.choice(gen.classes, size=rows, p=mix[u]).astype(np.int16)
        labs.append(lab)
        ims.append(gen.sample(lab, u / max(uploads - 1, 1), salt=10**6 + seed * 1000 + u))
    return np.concatenate(labs), np.concatenate(ims)


def class_stages(gen: Patterns, stages: int, per_class: int, seed: int, early: float = 0.9
                 ) -> tuple[list[str], np.ndarray, np.ndarray, list[np.ndarray]]:
    """Class-incremental uploads: stage s brings classes 2s, 2s+1 (``early`` of their rows)
    plus a share of every earlier class's remaining rows; the last stage's classes come
    whole. Returns (ids, labels, images, row indices per stage)."""
    per = gen.classes // stages
    rng = np.random.default_rng([seed, 11])
    labels = np.repeat(np.arange(gen.classes, dtype=np.int16), per_class)
    images = gen.sample(labels, 0.0, salt=seed * 1000 + 500)
    stage_of = np.empty(len(labels), np.int64)
    for c in range(gen.classes):
        first = c // per
        rows = rng.permutation(np.flatnonzero(labels == c))
        later = stages - 1 - first
        n_first = per_class if later == 0 else int(round(early * per_class))
        stage_of[rows[:n_first]] = first
        if later:
            stage_of[rows[n_first:]] = first + 1 + np.arange(per_class - n_first) % later
    ids = [f"c{seed}-r{i:07d}" for i in range(len(labels))]
    return ids, labels, images, [np.flatnonzero(stage_of == s) for s in range(stages)]
