"""The configuration's tables as frozen pydantic dataclasses: what each ``[section]`` of a
dataset TOML may hold, its defaults and its rules. Loading and validating a file is
:mod:`shardline.core.config` (which also re-exports every name here).

Unknown keys are rejected (``extra="forbid"``) and scalars are strict (a string is never
read as a number); a validator's message says the rule and the value found.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, Strict, field_validator, model_validator
from pydantic.dataclasses import dataclass
from pydantic.json_schema import SkipJsonSchema

from shardline.core.field_spec import RESERVED, FieldSpec, TargetSpec

PARTITION_KEYS = ("batch", "label")
# The trainer's built-in model names (shardline.trainer.model.MODELS; a test keeps the two
# equal). Checked here so a typo fails when the file is loaded, not after a dataset is
# ingested; any other model is an import path "package.module:factory" (its shape is checked
# here, nothing is imported at load time).
MODEL_NAMES = ("cnn", "resnet", "mlp")
IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
# Share of rows (by id hash, ``core.idhash``) held out for evaluation: [dataset]
# holdout_fraction, fixed at ingest; [train] holdout_fraction defaults to the same value.
HOLDOUT_FRACTION = 0.15
# The sweep window (minutes): Iceberg's orphan cleanup keeps 3 days, Delta's VACUUM 7;
# under a day a slow run could see its own files swept (issue 23).
SWEEP_DEFAULT_MINUTES = 3 * 24 * 60.0
SWEEP_FLOOR_MINUTES = 24 * 60.0

Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]     # strict float still takes a TOML integer
Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
Positive = Annotated[int, Strict(), Field(gt=0)]
_TABLE = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=_TABLE)
class ImageSpec:
    """Image column and the shape every decoded image must have (H, W, C)."""

    column: Str = "image"
    shape: tuple[Positive, ...] = Field(
        default=(8, 8, 1), description="[H, W, C] after decoding; C is 1, 3 or 4")

    @field_validator("shape")
    @classmethod
    def _hwc(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(v) != 3:
            raise ValueError(f"must be [H, W, C] with positive sizes, got {list(v)}")
        if v[2] not in (1, 3, 4):
            raise ValueError(f"channels (the C of [H, W, C]) must be 1, 3 or 4, got {v[2]}")
        return v

    @property
    def nbytes(self) -> int:
        h, w, c = self.shape
        return h * w * c


@dataclass(frozen=True, config=_TABLE)
class ShardSpec:
    """How converted rows are cut into Arrow IPC shards."""

    target_mb: Float = Field(default=64.0, gt=0, description="shard size aim in MiB")
    max_rows: Positive = 100_000
    record_batch_rows: Positive = 8192
    compression: Literal["lz4", "none"] = "none"
    partition_by: tuple[Literal["batch", "label"], ...] = ("batch",)

    @field_validator("partition_by")
    @classmethod
    def _batch_first(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or v[0] != "batch" or len(set(v)) != len(v):
            raise ValueError(f"must start with 'batch' and use only {list(PARTITION_KEYS)} "
                             f"once each, got {list(v)}")
        return v

    def rows_per_shard(self, row_bytes: int) -> int:
        """Rows per shard so a shard is about ``target_mb`` (and at most ``max_rows``)."""
        by_size = int(self.target_mb * 1024 * 1024) // max(row_bytes, 1)
        return max(1, min(self.max_rows, by_size))


@dataclass(frozen=True, config=_TABLE)
class ValidationSpec:
    """Gate settings for the great-expectations suite run on every batch."""

    max_quarantine_fraction: Float = Field(default=0.1, ge=0.0, le=1.0)
    min_rows: Annotated[int, Strict(), Field(ge=0)] = 1


@dataclass(frozen=True, config=_TABLE)
class LimitsSpec:
    """Input limits, checked before parsing/decoding (``tasks/convert/limits.py``;
    docs/reliability.md). A value over one is a quarantine row naming the limit."""

    max_object_bytes: Positive = 4 << 30
    max_row_bytes: Positive = 32 << 20
    max_json_depth: Positive = 64
    max_pixels: Positive = 50_000_000
    max_label_chars: Positive = 256
    max_id_chars: Positive = 512


@dataclass(frozen=True, config=_TABLE)
class DatasetConfig:
    """One dataset: where uploads land, how rows are identified and labelled."""

    name: Str
    incoming: Str
    classes: tuple[Str, ...] = Field(
        default=(), description="class names (required for class, multilabel and mask "
        "targets); new classes may only be appended")
    id_column: Str = "id"
    label_column: Str = "label"
    root: Str = "lake"
    image: ImageSpec = dataclasses.field(default_factory=ImageSpec)
    # Typed fields ([dataset.fields.<name>]) and the target ([dataset.target]); without
    # them, [dataset.image] + classes is the shorthand for one image field + a class target.
    fields: dict[Str, FieldSpec] = dataclasses.field(default_factory=dict)
    target: TargetSpec | None = None
    shards: ShardSpec = dataclasses.field(default_factory=ShardSpec)
    validation: ValidationSpec = dataclasses.field(default_factory=ValidationSpec)
    limits: LimitsSpec = dataclasses.field(default_factory=LimitsSpec)
    # Staging folders and unreferenced shards older than this (by the store's clock, and
    # of no running ingest) are swept by later runs; three days, at least one.
    sweep_after_minutes: Float = Field(default=SWEEP_DEFAULT_MINUTES)
    # Reconciling ingests (the schedule, `shardline ingest`) list incoming/ from the newest
    # partition they know (S3 StartAfter) when upload keys sort in upload order by their
    # first path segment below `incoming` (dates, sequence numbers); a full listing every
    # `full_listing_every_hours` (by the store's clock) or with `shardline ingest --full`.
    incremental_listing: Bool = False
    full_listing_every_hours: Float = Field(default=168.0, gt=0)
    # Shards a compaction replaced stay this long after it, for readers (a training run, a
    # loader) of the versions before it.
    retain_replaced_minutes: Float = Field(default=1440.0, gt=0)
    holdout_fraction: Float = Field(
        default=HOLDOUT_FRACTION, gt=0.0, lt=1.0,
        description="share of rows (by id hash) ingest writes into held-out shards; fixed "
                    "by the first version that does, never changed after")

    @field_validator("sweep_after_minutes")
    @classmethod
    def _sweep_floor(cls, v: float) -> float:
        if v < SWEEP_FLOOR_MINUTES:
            raise ValueError(f"{v:g} is under the floor of "
                             f"{SWEEP_FLOOR_MINUTES:g} (a day): a run slower than the window "
                             "could lose its files; set at least that (default 4320, 3 days)")
        return v

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or "/" in v:
            raise ValueError(f"must be a non-empty name without '/', got {v!r}")
        return v

    @field_validator("classes")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dupes = sorted({c for c in v if v.count(c) > 1})
        if dupes:
            raise ValueError(f"has duplicates {dupes}: each class name once")
        return v

    @field_validator("incoming")
    @classmethod
    def _trailing_slash(cls, v: str) -> str:
        return v if v.endswith("/") else v + "/"

    @model_validator(mode="after")
    def _declaration(self) -> DatasetConfig:
        problem = declaration_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def typed(self) -> bool:
        """Whether fields or a target are declared (else the legacy shorthand holds)."""
        return bool(self.fields) or self.target is not None

    @property
    def field_specs(self) -> tuple[tuple[str, FieldSpec], ...]:
        """(name, spec) of every input field, in declaration order; the shorthand's one
        ``image`` field (uint8, PNG/JPEG, from ``[dataset.image] column``) when none."""
        if self.fields:
            return tuple(self.fields.items())
        return (("image", FieldSpec(kind="image", dtype="uint8", shape=self.image.shape,
                                    column=self.image.column, formats=("PNG", "JPEG"))),)

    @property
    def target_spec(self) -> TargetSpec:
        """The target; the shorthand's ``class`` target in the ``label`` column when none
        is declared."""
        return self.target or TargetSpec(kind="class", column=self.label_column)

    def source_column(self, name: str) -> str:
        """The source column (JSON key, CSV/Parquet column, Zarr array) of field or target
        ``name``."""
        t = self.target_spec
        if name == t.name:
            return t.column or self.label_column
        spec = dict(self.field_specs)[name]
        return spec.column or name

    @property
    def prefix(self) -> str:
        """Key prefix of everything shardline writes for this dataset (no trailing slash)."""
        return f"{self.root.strip('/')}/{self.name}"


def declaration_problem(cfg: DatasetConfig) -> str | None:
    """What is wrong across the fields, target and classes of ``cfg``, or None."""
    t = cfg.target_spec
    names = [n for n, _ in cfg.field_specs]
    bad = [n for n in names if n in RESERVED or n == t.name or not n or "/" in n]
    if bad:
        return (f"field name(s) {bad} clash with the row's own columns "
                f"({', '.join((*RESERVED, t.name))}) or are not plain names: rename them")
    if t.name in RESERVED:
        return f"target name {t.name!r} is one of the row's own columns: rename it"
    if t.kind in ("class", "multilabel", "mask") and not cfg.classes:
        return f"a {t.kind} target needs classes = [...] (at least one)"
    if t.kind == "class" and len(cfg.classes) > 32767:
        return f"{len(cfg.classes)} classes do not fit the int16 label column (32767 at most)"
    if t.kind == "mask" and t.dtype == "uint8" and len(cfg.classes) > 256:
        return f"a uint8 mask holds 256 classes at most, got {len(cfg.classes)}: dtype int16"
    if "label" in cfg.shards.partition_by and t.kind != "class":
        return f"shards.partition_by 'label' needs a class target, not {t.kind}"
    return None


@dataclass(frozen=True, config=_TABLE)
class TrainConfig:
    """Training settings ([train] in the TOML). Read by the trainer only."""

    model: Str = Field(default="cnn", description=f"a built-in ({', '.join(MODEL_NAMES)}) or "
                       "the import path of your factory, package.module:function")
    width: Positive = 32
    depth: Positive = 2
    epochs: Positive = 3
    batch_size: Positive = 32
    lr: Float = Field(default=2e-3, ge=0, description="0 freezes the weights")
    weight_decay: Float = Field(default=1e-4, ge=0)
    lr_schedule: Literal["cosine", "constant"] = Field(
        default="cosine", description="cosine: lr for the first lr_hold of the run's steps, "
                                      "then down to lr x lr_final along half a cosine "
                                      "(trainer.schedule); constant: lr throughout")
    lr_hold: Float = Field(default=0.8, ge=0.0, lt=1.0,
                           description="cosine: the share of the run's steps at lr before "
                                       "the rate starts to fall")
    lr_final: Float = Field(default=0.05, ge=0.0, le=1.0,
                            description="cosine: the last step's rate, as a share of lr")
    replay_ratio: Float = Field(default=0.4, ge=0.0, lt=1.0)
    replay_resample: Bool = Field(
        default=True, description="draw the replay sample afresh every epoch (the same "
                                  "number of rows: an update reads more of the history "
                                  "for the same cost); false: the same rows every epoch")
    holdout_fraction: Float = Field(
        default=HOLDOUT_FRACTION, gt=0.0, lt=1.0,
        description="defaults to [dataset] holdout_fraction; a dataset that recorded another "
                    "value refuses to train")
    promote_tolerance: Float = Field(
        default=0.01, ge=0.0, le=1.0,
        description="smallest drop of the held-out per-row score (accuracy; row F1; "
                    "regression: R² points) vs the live or the best promoted model (same "
                    "rows, paired test) that refuses a candidate")
    forget_tolerance: Float = Field(
        default=0.01, ge=0.0, le=1.0,
        description="smallest drop on earlier data vs the live model (same rows) that "
                    "refuses a candidate")
    gate_alpha: Float = Field(
        default=0.05, gt=0.0, lt=0.5,
        description="significance level of the gate's one-sided paired tests: a drop is "
                    "refused only when the rows show it with this confidence")
    seed: Int = 0
    shuffle_window: Positive = 8192
    cache_dir: Str = Field(default=".shardline/cache",
                           description="env SHARDLINE_CACHE_DIR overrides")
    cache_max_gb: Float = Field(default=20.0, gt=0,
                                description="env SHARDLINE_CACHE_MAX_GB overrides")
    fetch_threads: Positive = 4
    compile: Bool = False
    logit_adjust: Bool = Field(
        default=True, description="class targets: an update whose class mix is not the "
                                  "data's (new rows whole, older ones sampled) shifts the "
                                  "loss's logits by log(stream prior / data prior), against "
                                  "the recency bias of classes that grow (trainer.balance)")
    align_head: Bool = Field(
        default=False, description="after an update that grew the head, scale the new "
                                   "classes' output rows to the old ones' mean norm "
                                   "(weight aligning, trainer.balance)")
    distill: Float = Field(
        default=1.0, ge=0.0, description="class targets: weight of the parent's answers on "
                                         "its classes, distilled into an update that grew "
                                         "the head, against forgetting (trainer.distill); "
                                         "0 off")
    model_args: dict[Str, Any] = Field(
        default_factory=dict, description="keyword arguments of the model factory "
                                          "([train.model_args])")
    name: Str | None = Field(
        default=None, description="the registry's model name (models/<dataset>/<name>/); "
                                  "default: the built-in's name or the factory's function name")
    step: Str | None = Field(default=None, description="package.module:function(model, batch) "
                             "-> loss or (loss, metrics): replaces the built-in loss")
    score: Str | None = Field(default=None, description="package.module:function(model, batch) "
                              "-> one score per row, higher is better: held-out evaluation "
                              "and the gate")

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v not in MODEL_NAMES and not IMPORT_PATH.fullmatch(v):
            raise ValueError(f"unknown model {v!r}: use a built-in ({', '.join(MODEL_NAMES)}) "
                             "or your factory's import path, package.module:function")
        return v

    @field_validator("step", "score")
    @classmethod
    def _hook_path(cls, v: str | None) -> str | None:
        if v is not None and not IMPORT_PATH.fullmatch(v):
            raise ValueError(f"{v!r} is not an import path; write package.module:function")
        return v

    @field_validator("name")
    @classmethod
    def _registry_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError(f"model name {v!r} must be 1-64 letters, digits, '_', '.', '-' "
                             "(it names a folder of the registry)")
        return v

    @property
    def registry_name(self) -> str:
        """The model's folder in the registry: ``name``, else the built-in's name or the
        factory's function name."""
        return self.name or self.model.rpartition(":")[2]


@dataclass(frozen=True, config=_TABLE)
class Config:
    """A whole configuration file."""

    dataset: DatasetConfig
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    path: SkipJsonSchema[str | None] = None
