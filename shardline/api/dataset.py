"""Open any version of a dataset: Arrow, pandas, torch. Read-only.

    import shardline
    ds = shardline.open_dataset("digits")           # latest version; or version=3
    ds.fields                                        # the typed fields and the target
    table = ds.to_table()                            # pyarrow.Table (also .to_pandas())
    held = shardline.open_dataset("digits", split="holdout")   # the evaluation rows only

A version is read through its manifest: the exact shard files it lists, with the schema it
records, so a reader never lists ``shards/`` and never infers hive partitions from folder
names (a ``label=3`` folder would otherwise add a second, differently typed ``label``).
"""

from __future__ import annotations

import base64
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from shardline.api.access import DatasetRef, arrow_filesystem, dataset_ref, store_for
from shardline.api.label_diff import changes_between
from shardline.api.splits import Split, check_split, read_split, shards_of
from shardline.api.tensors import column_array, to_frame
from shardline.api.versions import VersionDiff
from shardline.core.config import (
    Config,
    DatasetConfig,
    StoreSettings,
    TrainConfig,
)
from shardline.core.fields import DatasetInfo, dataset_info
from shardline.core.idhash import dataset_fraction
from shardline.core.manifest import Manifest, ShardEntry, list_versions, resolve_version
from shardline.core.schema import QUARANTINE_SCHEMA
from shardline.core.store import ObjectStore
from shardline.resources import needs_extra
from shardline.trainer.columns import Layout, layout_for, optional_fields

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.dataset as pads

class Dataset:
    """One committed version of a dataset (immutable), opened from its manifest.

    ``split``: ``"all"`` rows, or the ``"train"`` / ``"holdout"`` split (what the trainer
    trains / evaluates on): shards, files, tables and the torch loader then cover that
    split only, reading its own shards (plus older mixed shards, masked by id hash)."""

    def __init__(self, store: ObjectStore, manifest: Manifest, prefix: str,
                 config: Config | DatasetConfig | None = None, split: Split = "all") -> None:
        self.store, self.manifest, self.prefix = store, manifest, prefix
        self.split: Split = check_split(split)
        self._given = config
        self._config = config.dataset if isinstance(config, Config) else config
        # [train] settings when opened from a whole config (the loader's holdout split)
        self.train: TrainConfig | None = config.train if isinstance(config, Config) else None

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, version={self.version}, rows={self.rows}, "
                f"s3://{self.store.bucket}/{self.prefix}/)")

    # -- what it is -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.manifest.dataset

    @property
    def version(self) -> int:
        return self.manifest.version

    @property
    def rows(self) -> int:
        """Rows of the version (all splits)."""
        return self.manifest.rows

    @cached_property
    def holdout_fraction(self) -> float:
        """The held-out fraction: fixed at ingest (recorded by the version), else the
        ``[train]`` one of the config the dataset was opened with, else the default."""
        return dataset_fraction(self.manifest, self.train.holdout_fraction
                                if self.train is not None else None)

    @property
    def classes(self) -> list[str]:
        return list(self.manifest.schema.classes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.manifest.schema.shape)

    @cached_property
    def fields(self) -> DatasetInfo:
        """The version's typed fields and target (name, kind, dtype, per-sample shape as
        the loader serves it, and the statistics the version records; ``core.fields``)."""
        return dataset_info(self.config, self.manifest.stats)

    @cached_property
    def schema(self) -> pa.Schema:
        """The row schema the version records (one column per field and the target, plus
        ``id``, ``source_key``, ``source_row``)."""
        info = self.manifest.schema
        if info.ipc_b64:
            return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(info.ipc_b64)))
        from shardline.core.schema import data_schema

        return data_schema(self.config)

    @cached_property
    def config(self) -> DatasetConfig:
        """The dataset's configuration as published with the version."""
        if self._config is not None:
            return self._config
        from pydantic import TypeAdapter, ValidationError

        try:
            return TypeAdapter(DatasetConfig).validate_python(self.manifest.config)
        except ValidationError:   # older keys: rebuild what readers need from the schema
            return DatasetConfig(name=self.name, incoming="incoming/", classes=tuple(
                self.classes), root=self.prefix.rsplit("/", 1)[0],
                image={"shape": self.shape})  # type: ignore[arg-type]

    # -- Arrow / pandas ---------------------------------------------------------------------
    def shards(self, new_only: bool = False) -> list[ShardEntry]:
        """The version's shard entries of this split (``new_only``: those its own batch
        added); for a split, the older mixed shards are included (their rows are masked)."""
        every = self.manifest.new() if new_only else list(self.manifest.shards)
        return shards_of(every, self.split)

    def files(self, new_only: bool = False) -> list[str]:
        """``bucket/key`` paths of the shard files (for ``pyarrow.fs``)."""
        return [f"{self.store.bucket}/{s.path}" for s in self.shards(new_only)]

    def to_dataset(self, new_only: bool = False,
                   shards: list[ShardEntry] | None = None) -> pads.Dataset:
        """A ``pyarrow.dataset`` over exactly the listed files, with the recorded schema (for
        a split: its files, mixed shards unmasked; rows deleted by a deletion vector are in
        the files too: ``to_table`` / ``to_pandas`` leave both out)."""
        import pyarrow.dataset as pads

        paths = ([f"{self.store.bucket}/{s.path}" for s in shards] if shards is not None
                 else self.files(new_only))
        return pads.dataset(paths, schema=self.schema, format="ipc",
                            filesystem=arrow_filesystem(self.store.settings))

    def to_table(self, columns: list[str] | None = None, filter: Any = None,
                 new_only: bool = False) -> pa.Table:
        """The rows as one ``pyarrow.Table`` (``filter``: a ``pyarrow.compute`` expression)."""
        shards = self.shards(new_only)
        if not shards:
            return self.schema.empty_table().select(columns or self.schema.names)
        return read_split(lambda some, cols: self._read(some, cols, filter), shards,
                          self.split, lambda: self.holdout_fraction, columns)

    def _read(self, shards: list[ShardEntry], columns: list[str] | None, filter: Any
              ) -> pa.Table:
        """The rows of ``shards``: files without a deletion vector through one Arrow
        dataset, a masked shard on its own without its masked rows (``core.deletions``)."""
        masks = self.manifest.masks() if self.manifest.doc.deletions is not None else {}
        clean = [s for s in shards if s.path not in masks]
        parts = [self.to_dataset(shards=clean).to_table(columns=columns, filter=filter)] \
            if clean else []
        for s in (s for s in shards if s.path in masks):
            t = self.to_dataset(shards=[s]).to_table()
            keep = np.ones(t.num_rows, bool)
            keep[masks[s.path]] = False
            t = t.filter(pa.array(keep))
            t = t.filter(filter) if filter is not None else t
            parts.append(t.select(columns) if columns is not None else t)
        if not parts:
            return self.schema.empty_table().select(columns or self.schema.names)
        return pa.concat_tables(parts)

    def to_pandas(self, columns: list[str] | None = None, new_only: bool = False,
                  label_names: bool = False) -> pd.DataFrame:
        """The rows as a DataFrame: each image or tensor cell a numpy N-d array (an image
        H, W, C); ``label_names`` adds a ``class`` column with names (a class target)."""
        df = to_frame(self.to_table(columns, new_only=new_only), self._layout)
        label = self._layout.label_source
        if label_names and label is not None and label in df:
            df["class"] = np.asarray(self.fields.target.classes, dtype=object)[
                df[label].to_numpy()]
        return df

    def array(self, table: pa.Table, name: str) -> np.ndarray:
        """Field (or target) ``name`` of ``table`` as one numpy array ``[N, *shape]`` in its
        stored shape (an image H, W, C), a view of the Arrow buffer where it can be."""
        for col in self._layout.columns:
            if col.name == name:
                return column_array(table, col)
        return table.column(name).to_numpy()

    def images(self, table: pa.Table) -> np.ndarray:
        """The first image field of ``table`` (legacy: ``image``) as ``[N, H, W, C]``."""
        if not self.fields.images:
            raise ValueError(f"dataset {self.name!r} declares no image field (fields: "
                             f"{[f.name for f in self.fields.fields]}); use "
                             "ds.array(table, name)")
        return self.array(table, self.fields.images[0].name)

    @cached_property
    def _layout(self) -> Layout:
        return layout_for(self.fields, optional_fields(self.config))

    # -- quarantine, history ----------------------------------------------------------------
    def quarantine(self, all_batches: bool = False) -> pa.Table:
        """Rows rejected by the version's batch (``all_batches``: by every live batch), with
        ``source_key``, ``source_row``, ``id``, ``label``, ``rule``, ``message``, ``raw``."""
        shards = self.manifest.quarantine.shards
        if not all_batches:
            own = self.manifest.new_batch
            shards = [s for s in shards if own is not None and s.batch == own.id]
        if not shards:
            return QUARANTINE_SCHEMA.empty_table()
        import pyarrow.dataset as pads

        return pads.dataset([f"{self.store.bucket}/{s.path}" for s in shards],
                            schema=QUARANTINE_SCHEMA, format="ipc",
                            filesystem=arrow_filesystem(self.store.settings)).to_table()

    def versions(self) -> list[int]:
        return list_versions(self.store, self.prefix)

    def diff(self, other: int | Dataset) -> VersionDiff:
        """What ``other`` (a version number or Dataset) changed relative to this version."""
        that = other if isinstance(other, Dataset) else Dataset(
            self.store, resolve_version(self.store, self.prefix, other), self.prefix,
            self._given)
        mine = {s.path: s for s in self.manifest.shards}
        theirs = {s.path: s for s in that.manifest.shards}
        my_batches = {b.id for b in self.manifest.batches}
        their_batches = {b.id for b in that.manifest.batches}
        return VersionDiff(
            self.name, self.version, that.version,
            added=[s for p, s in theirs.items() if p not in mine],
            removed=[s for p, s in mine.items() if p not in theirs],
            added_batches=[b.id for b in that.manifest.batches if b.id not in my_batches],
            removed_batches=[b.id for b in self.manifest.batches if b.id not in their_batches],
            labels=changes_between(self.store, self.prefix, self.manifest, that.manifest))

    # -- torch ------------------------------------------------------------------------------
    def torch_loader(self, batch_size: int = 256, **kwargs: Any) -> Any:
        """A torchdata ``Loader`` of batches (one tensor per field and the target, ``key``,
        ...: ``{"image", "label", "key", ...}`` for an image dataset), built on the
        trainer's loader (windowed shuffle, resume through ``state_dict``, ranks).

        See :func:`shardline.api.torch_data.make_loader` for the arguments."""
        with needs_extra("Dataset.torch_loader", "train"):
            from shardline.api.torch_data import make_loader

        return make_loader(self, batch_size, **kwargs)

    def torch_dataset(self, batch_size: int = 256, **kwargs: Any) -> Any:
        """A ``torch.utils.data.IterableDataset`` of batches (use ``DataLoader(ds,
        batch_size=None)``); same arguments as :meth:`torch_loader`."""
        with needs_extra("Dataset.torch_dataset", "train"):
            from shardline.api.torch_data import BatchIterable

        return BatchIterable(self, batch_size, kwargs)


def open_dataset(dataset: DatasetRef, version: int | None = None, *,
                 store: ObjectStore | StoreSettings | None = None, bucket: str | None = None,
                 endpoint_url: str | None = None, root: str = "lake", split: Split = "all",
                 **settings: Any) -> Dataset:
    """Open ``version`` (default: the latest) of ``dataset`` (a name, TOML path or config).

    ``split``: ``"all"`` (default), ``"train"`` or ``"holdout"`` (the trainer's split; see
    :class:`Dataset`).

    Where: ``store`` or ``bucket``/``endpoint_url`` (and any other ``StoreSettings`` field:
    ``access_key``, ``secret_key``, ``region``), else ``SHARDLINE_BUCKET`` /
    ``SHARDLINE_S3_ENDPOINT_URL`` / ``AWS_*``, else the running embedded stack.

    Raises:
        ConfigError: no bucket is configured anywhere.
        StoreError: no such version (the message names the latest), S3 unreachable.
    """
    cfg, prefix = dataset_ref(dataset)
    if cfg is None:
        prefix = f"{root.strip('/')}/{prefix.strip('/')}"
    s = store_for(store, bucket=bucket, endpoint_url=endpoint_url, **settings)
    return Dataset(s, resolve_version(s, prefix, version), prefix, cfg, split)


def list_dataset_versions(dataset: DatasetRef, *, store: ObjectStore | StoreSettings | None = None,
                          bucket: str | None = None, endpoint_url: str | None = None,
                          root: str = "lake", **settings: Any) -> list[dict[str, Any]]:
    """One row per committed version, latest first (counts from the version documents)."""
    from shardline.api.versions import version_rows

    cfg, prefix = dataset_ref(dataset)
    if cfg is None:
        prefix = f"{root.strip('/')}/{prefix.strip('/')}"
    return version_rows(store_for(store, bucket=bucket, endpoint_url=endpoint_url,
                                  **settings), prefix)
