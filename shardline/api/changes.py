"""Changing labelled data from Python: delete rows by id (``shardline delete`` does the same).

    import shardline
    result = shardline.delete_rows("digits", ["id-17", "id-42"])   # a new version
    result.version, result.rows_deleted

The deletion is a new version whose shards and id files no longer hold the rows, their
consumed raw uploads removed (``shardline.tasks.erase``: after ``expire`` + ``vacuum`` no
object holds them); ``mask=True`` masks them with deletion vectors instead
(``shardline.tasks.delete``). The versions before it are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shardline.api.access import DatasetRef
from shardline.api.dataset import open_dataset
from shardline.tasks.delete import DeleteResult, delete_ids
from shardline.tasks.erase import EraseResult, erase_ids


def delete_rows(dataset: DatasetRef, ids: Iterable[str], *, mask: bool = False,
                **where: Any) -> DeleteResult | EraseResult:
    """Publish the next version of ``dataset`` without the rows of ``ids`` (erased; with
    ``mask``, masked by deletion vectors).

    ``where``: as :func:`shardline.open_dataset` (``store``, ``bucket``, ``endpoint_url``,
    ``root``, ...).

    Raises:
        DeleteRefused: an id is in no live batch (named in the message); nothing changed.
    """
    ds = open_dataset(dataset, **where)
    return (delete_ids if mask else erase_ids)(ds.store, ds.config, [str(i) for i in ids])
