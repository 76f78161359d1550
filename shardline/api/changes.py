"""Changing labelled data from Python: delete rows by id (``shardline delete`` does the same).

    import shardline
    result = shardline.delete_rows("digits", ["id-17", "id-42"])   # a new version
    result.version, result.rows_deleted

The deletion is a new version that masks the rows with deletion vectors
(``shardline.tasks.delete``); the versions before it are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shardline.api.access import DatasetRef
from shardline.api.dataset import open_dataset
from shardline.tasks.delete import DeleteResult, delete_ids


def delete_rows(dataset: DatasetRef, ids: Iterable[str], **where: Any) -> DeleteResult:
    """Publish the next version of ``dataset`` without the rows of ``ids``.

    ``where``: as :func:`shardline.open_dataset` (``store``, ``bucket``, ``endpoint_url``,
    ``root``, ...).

    Raises:
        DeleteRefused: an id is in no live batch (named in the message); nothing changed.
    """
    ds = open_dataset(dataset, **where)
    return delete_ids(ds.store, ds.config, [str(i) for i in ids])
