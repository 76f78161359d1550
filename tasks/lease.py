"""The store's clock and the leases of running ingests: what the sweep judges age by.

Hosts' clocks drift (the outside campaign ran one 2 h ahead); the store's does not differ
between them. So the sweep never reads the local clock: it writes a small marker
(``sweep/clock``) and takes the marker's ``LastModified`` as "now", the same clock that
stamped every candidate it compares against (:func:`store_now`).

A running ingest holds a lease: ``leases/<run>``, rewritten (its ``LastModified`` moves) at
each stage by :func:`heartbeat` and removed when the run ends (:func:`release`). A lease
refreshed within the sweep window is alive; the sweep keeps everything that run staged or
copied (keys carrying its run id, its passes' ids ``<run>r<n>`` included), however old
(:func:`protected`). A run that died leaves a lease that stops moving; once it is older
than the window, the run's leftovers are swept like any crashed run's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from shardline.core import layout
from shardline.core.store import Store


def store_now(store: Store, prefix: str) -> datetime:
    """The store's current time: the ``LastModified`` of a marker written now."""
    key = layout.sweep_clock_key(prefix)
    store.put_bytes(key, b"")
    info = store.head(key)
    if info is None:         # read-after-write is strong on S3; a store without it is unsafe
        raise RuntimeError(f"{store.uri(key)} vanished right after it was written; the "
                           "sweep needs read-after-write consistency and did nothing")
    return info.last_modified


def heartbeat(store: Store, prefix: str, run_id: str) -> None:
    """Take or refresh ``run_id``'s lease (a stage of the run starts)."""
    store.put_bytes(layout.leases_prefix(prefix) + run_id, b"")


def release(store: Store, prefix: str, run_id: str) -> None:
    """Drop ``run_id``'s lease (the run ended; its staging is gone or is litter now)."""
    store.delete([layout.leases_prefix(prefix) + run_id])


def live_runs(store: Store, prefix: str, now: datetime, window: timedelta) -> set[str]:
    """Runs whose lease was refreshed within ``window`` of the store time ``now``."""
    root = layout.leases_prefix(prefix)
    return {o.key[len(root):] for o in store.list(root) if o.last_modified >= now - window}


def protected(key: str, runs: Iterable[str]) -> bool:
    """Whether ``key`` belongs to one of ``runs`` (staging folder or a final key carrying
    the run id, or a pass id ``<run>r<n>`` of it)."""
    return any(f"/{r}/" in key or f"-{r}." in key or f"-{r}r" in key or f"/{r}r" in key
               for r in runs)


def stale(newest: datetime, now: datetime, window: timedelta) -> bool:
    """Old enough to sweep: last written more than ``window`` before the store time."""
    return newest < now - window
