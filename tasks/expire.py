"""Expire old dataset versions (``shardline expire``): their documents go, nothing else.

Which versions go is :func:`plan_expiry`'s decision, a pure function of the versions (number
-> when its document was written, by the store's clock), the store's time now, the rule
(``--keep N`` newest, ``--older-than D``; both: a version must break both) and what is held.
Never expired:

- the latest version (a publish builds on it; the latest-version hint names it);
- the dataset version of a live (promoted or pinned) model in the registry (the caller
  passes them: ``trainer.retention.versions_in_use``; tasks do not read the registry);
- the version a running training reads: its lease ``leases/train-<run>`` (``core.retention
  .hold``) refreshed within the sweep window by the store's clock (``tasks.lease``).

How an expiry commits (``core.retention``): the latest-version hint is moved forward to the
latest first (readers probing from it never meet the hole below), each expired document is
copied to ``retention/v<N>.json``, the versions are added to ``retention/expired.json`` by
compare-and-swap (the commit), and only then are the documents deleted. A run killed midway
is finished by the next one (recorded versions whose documents remain are expired again).
A publish racing an expiry writes ``versions/v<L+1>.json`` with If-None-Match as always:
the expiry never writes there, so both land. Files are removed later by ``shardline
vacuum`` (``tasks.vacuum``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shardline.core import layout
from shardline.core.config import DatasetConfig
from shardline.core.errors import StoreError
from shardline.core.latest import advance_hint
from shardline.core.retention import read_expired, record_expired
from shardline.core.store import Store
from shardline.tasks.lease import store_now

_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhm]?)\s*$")
_UNIT = {"d": "days", "": "days", "h": "hours", "m": "minutes"}


class ExpireRefused(StoreError):
    """The expiry was asked for with no rule or an unreadable one."""


@dataclass(frozen=True)
class ExpiryPlan:
    latest: int | None
    expire: list[int]                                   # ascending
    kept: dict[int, str] = field(default_factory=dict)  # held back although the rule matched


@dataclass(frozen=True)
class ExpireResult:
    dataset: str
    latest: int | None
    expired: list[int]
    kept: dict[int, str]
    dry_run: bool

    def summary(self) -> str:
        verb = "would expire" if self.dry_run else "expired"
        what = (f"{len(self.expired)} version(s) ({_ranges(self.expired)})" if self.expired
                else "no version")
        held = "; ".join(f"v{v}: {why}" for v, why in sorted(self.kept.items()))
        return (f"{self.dataset}: {verb} {what}; latest v{self.latest}"
                + (f"; kept {held}" if held else ""))


def parse_age(text: str) -> timedelta:
    """``7d``, ``36h``, ``90m`` or a plain number of days.

    Raises:
        ExpireRefused: anything else, or a negative age."""
    m = _AGE_RE.match(text)
    if m is None:
        raise ExpireRefused(f"--older-than {text!r} is not an age; write e.g. 30d, 36h or 90m")
    return timedelta(**{_UNIT[m.group(2)]: float(m.group(1))})


def plan_expiry(versions: dict[int, datetime], now: datetime, *, keep: int | None,
                older_than: timedelta | None, held: dict[int, str]) -> ExpiryPlan:
    """The versions to expire (see the module docstring for the rules).

    Raises:
        ExpireRefused: neither rule given, or ``keep`` under 1."""
    if keep is None and older_than is None:
        raise ExpireRefused("expire needs --keep N (newest versions kept) or --older-than D "
                            "(e.g. 30d), or both")
    if keep is not None and keep < 1:
        raise ExpireRefused(f"--keep {keep}: the latest version is always kept; give 1 or more")
    if not versions:
        return ExpiryPlan(None, [])
    latest = max(versions)
    newest = sorted(versions, reverse=True)[: keep or 0]
    candidates = [v for v in sorted(versions) if v != latest and v not in newest and
                  (older_than is None or versions[v] < now - older_than)]
    kept = {v: held[v] for v in candidates if v in held}
    return ExpiryPlan(latest, [v for v in candidates if v not in held], kept)


def training_holds(store: Store, prefix: str, now: datetime,
                   window: timedelta) -> dict[int, str]:
    """Versions read by trainings whose lease is younger than ``window`` (store clock)."""
    root = layout.leases_prefix(prefix) + "train-"
    out: dict[int, str] = {}
    for o in store.list(root):
        if o.last_modified < now - window:
            continue          # a dead run's lease: it stopped moving a window ago
        try:
            version = int(json.loads(store.get_bytes(o.key))["version"])
        except (StoreError, ValueError, KeyError, TypeError):
            continue          # released meanwhile, or not a lease of ours
        out[version] = f"read by running training {o.key[len(root):]}"
    return out


def expire(store: Store, cfg: DatasetConfig, *, keep: int | None = None,
           older_than: timedelta | None = None, held: dict[int, str] | None = None,
           dry_run: bool = False, now: datetime | None = None) -> ExpireResult:
    """Expire versions of ``cfg``'s dataset by the rule; ``held``: versions live models
    use (number -> why). ``now``: the store's time (default: read from the store)."""
    now = now or store_now(store, cfg.prefix)
    listed = {v: o.last_modified for o in store.list(layout.versions_prefix(cfg.prefix))
              if (v := layout.version_of_key(o.key)) is not None}
    holds = {**training_holds(store, cfg.prefix, now,
                              timedelta(minutes=cfg.sweep_after_minutes)), **(held or {})}
    plan = plan_expiry(listed, now, keep=keep, older_than=older_than, held=holds)
    record = read_expired(store, cfg.prefix)
    unfinished = [v for v in listed if v in record and v != plan.latest]   # a killed run's
    todo = sorted(set(plan.expire) | set(unfinished))
    if not dry_run and todo and plan.latest is not None:
        advance_hint(store, cfg.prefix, plan.latest)
        for v in todo:
            store.copy(layout.version_key(cfg.prefix, v), layout.expired_doc_key(cfg.prefix, v))
        record_expired(store, cfg.prefix, todo, now)
        store.delete(layout.version_key(cfg.prefix, v) for v in todo)
    return ExpireResult(cfg.name, plan.latest, todo, plan.kept, dry_run)


def _ranges(vs: list[int]) -> str:
    out: list[str] = []
    for v in sorted(vs):
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(f"v{r}" for r in out)
