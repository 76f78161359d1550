"""The invariants a dataset and its model registry keep whatever happened to the pipeline
(faults, kills, hostile objects, repeated or lost events). Reusable: the soak checks them
after every cycle, the event and kill tests after their runs.

Dataset (:func:`check_dataset`):
- versions are 1..N with no gap, each one's parent the one before;
- every object a version references (batch lists, data and quarantine shards) exists and
  its bytes match the digests (sha256, XXH3-128) and row counts in the documents;
- no id is in two versions' new data, and no id or (source key, row) is published twice;
- with an :class:`Expected`: every uploaded row is published exactly once under its own
  source, or quarantined with its rule and a message; nothing else is published.

Models (:func:`check_models`): the promoted pointer names a complete model; every model
ever promoted passed its gate, and its held-out accuracy is never below the model it
replaced (on the same rows) by more than the tolerance it was judged with.

Readers (:class:`VersionWatcher`): a thread that polls the latest version while the
pipeline runs and records any version it could see but not read completely.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import xxhash

from shardline.core.config import DatasetConfig
from shardline.core.manifest import Manifest, list_versions, read_manifest
from shardline.core.store import ObjectStore


class InvariantBroken(AssertionError):
    pass


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise InvariantBroken(what)


@dataclass
class Expected:
    """What was uploaded, per source key: ids that must be published from it, and the
    rules of its rows that must be quarantined (a multiset)."""

    good: dict[str, set[str]] = field(default_factory=dict)
    bad: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, key: str, good: set[str] | list[str] = (),  # type: ignore[assignment]
            bad: list[str] = ()) -> None:                      # type: ignore[assignment]
        self.good.setdefault(key, set()).update(good)
        self.bad.setdefault(key, Counter()).update(bad)

    @property
    def rows(self) -> int:
        return sum(map(len, self.good.values())) + sum(sum(c.values())
                                                       for c in self.bad.values())


@dataclass
class DatasetReport:
    versions: int
    published: int
    quarantined: int
    objects_verified: int


def _table(data: bytes) -> pa.Table:
    with ipc.open_file(pa.BufferReader(data)) as f:
        return f.read_all()


class _Verifier:
    """Fetches each referenced object once and checks it against its entry."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.tables: dict[tuple[str, str], pa.Table] = {}

    def shard(self, s: Any, where: str) -> pa.Table:
        k = (s.path, s.sha256)
        if k not in self.tables:
            _require(self.store.head(s.path) is not None, f"{where}: {s.path} is missing")
            data = self.store.get_bytes(s.path)
            _require(hashlib.sha256(data).hexdigest() == s.sha256,
                     f"{where}: {s.path} sha256 differs from its entry")
            _require(s.xxh3_128 is None or xxhash.xxh3_128_hexdigest(data) == s.xxh3_128,
                     f"{where}: {s.path} xxh3_128 differs from its entry")
            _require(len(data) == s.bytes, f"{where}: {s.path} is {len(data)} bytes, entry "
                                            f"says {s.bytes}")
            t = _table(data)
            _require(t.num_rows == s.rows, f"{where}: {s.path} has {t.num_rows} rows, entry "
                                           f"says {s.rows}")
            self.tables[k] = t
        return self.tables[k]


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    return pa.concat_tables(tables) if tables else None


def check_dataset(store: ObjectStore, cfg: DatasetConfig, expected: Expected | None = None
                  ) -> DatasetReport:
    versions = list_versions(store, cfg.prefix)
    _require(versions == list(range(1, len(versions) + 1)),
             f"versions are not contiguous from 1: {versions}")
    v = _Verifier(store)
    owner: dict[str, int] = {}
    latest: Manifest | None = None
    for n in versions:
        m = read_manifest(store, cfg.prefix, n)     # batch lists are digest-checked on read
        where = f"{cfg.prefix} v{n}"
        _require(m.version == n and m.parent == (n - 1 if n > 1 else None),
                 f"{where}: version {m.version}, parent {m.parent}")
        for s in m.new():
            for rid in v.shard(s, where).column("id").to_pylist():
                _require(rid not in owner, f"id {rid!r} is new data of v{owner.get(rid)} and "
                                           f"of v{n}")
                owner[rid] = n
        latest = m
    if latest is None:
        _require(expected is None or expected.rows == 0,
                 f"no version, but {expected.rows if expected else 0} rows were uploaded")
        return DatasetReport(0, 0, 0, 0)
    where = f"{cfg.prefix} v{latest.version} (latest)"
    pub = _concat([v.shard(s, where) for s in latest.shards])
    quar = _concat([v.shard(s, where) for s in latest.quarantine.shards])
    ids = pub.column("id").to_pylist() if pub is not None else []
    dup = [k for k, c in Counter(ids).items() if c > 1]
    _require(not dup, f"{where}: ids published twice: {dup[:5]}")
    _require(len(ids) == latest.rows, f"{where}: {len(ids)} rows read, totals say "
                                      f"{latest.rows}")
    _require(set(ids) == set(owner), f"{where}: published ids and the versions' new data "
                                     "differ")
    pos = list(zip(pub.column("source_key").to_pylist(), pub.column("source_row").to_pylist(),
                   strict=True)) if pub is not None else []
    _require(len(set(pos)) == len(pos), f"{where}: a (source key, row) is published twice")
    by_key: dict[str, set[str]] = {}
    for (key, _), rid in zip(pos, ids, strict=True):
        by_key.setdefault(key, set()).add(rid)
    rules: dict[str, Counter[str]] = {}
    qrows = quar.to_pylist() if quar is not None else []
    for r in qrows:
        _require(bool(r["rule"]) and bool(r["message"]),
                 f"{where}: quarantine row without rule or message: {r}")
        rules.setdefault(r["source_key"], Counter())[r["rule"]] += 1
    if expected is not None:
        for key in sorted(set(expected.good) | set(expected.bad) | set(by_key) | set(rules)):
            want_good = expected.good.get(key, set())
            want_bad = +expected.bad.get(key, Counter())
            got_good, got_bad = by_key.get(key, set()), +rules.get(key, Counter())
            _require(got_good == want_good,
                     f"{where}: {key}: published {len(got_good)} ids, expected "
                     f"{len(want_good)}; missing {sorted(want_good - got_good)[:5]}, "
                     f"unexpected {sorted(got_good - want_good)[:5]}")
            _require(got_bad == want_bad, f"{where}: {key}: quarantined {dict(got_bad)}, "
                                          f"expected {dict(want_bad)}")
    return DatasetReport(len(versions), len(ids), len(qrows), len(v.tables))


def _no_shown_drop(n: int, meta: dict, after: float, before: float, tol: float) -> None:
    """A promoted model is not worse than the model it replaced by a drop its held-out rows
    show to matter: the gate's rule (trainer/gate.py), re-derived here from the recorded
    paired counts (McNemar mid-p and the interval's upper end from wins/losses), not taken
    from the gate's verdict. A drop within
    noise may be promoted; a record without evidence falls back to the fixed tolerance."""
    from scipy import stats

    live = [e for e in meta["gate"].get("evidence") or []
            if str(e["against"]).startswith("live model") and e["scope"] == "held-out"]
    if not live or live[0]["test"] != "McNemar mid-p":
        _require(after + tol >= before,
                 f"model {n} promoted with accuracy {after} below the model it replaced "
                 f"({before} on the same rows) by more than {tol}")
        return
    e = live[0]
    wins, losses, rows = int(e["wins"]), int(e["losses"]), int(e["rows"])
    _require(abs((wins - losses) / rows - (after - before)) < 1e-9,
             f"model {n}: its evidence ({wins} wins, {losses} losses on {rows} rows) is not "
             f"the accuracy change it records ({before} -> {after})")
    d = wins + losses
    alpha = float(e["alpha"])
    p = float(stats.binom.sf(losses, d, 0.5) + 0.5 * stats.binom.pmf(losses, d, 0.5)) \
        if d else 1.0
    # the upper end of the 1 - 2 alpha interval (Bonett & Price's adjusted Wald for
    # paired proportions): a drop is shown to matter when it lies the tolerance below 0
    p12, p21 = (wins + 1) / (rows + 2), (losses + 1) / (rows + 2)
    se = ((p12 + p21 - (p12 - p21) ** 2) / (rows + 2)) ** 0.5
    high = p12 - p21 + float(stats.norm.ppf(1 - alpha)) * se
    _require(not (p < alpha and high <= -float(e["tolerance"]) + 1e-12),
             f"model {n} promoted {before - after:.4f} below the model it replaced on the "
             f"same {rows} rows, a drop they show to be at least {e['tolerance']} (mid-p "
             f"{p:.3g} < alpha {alpha}, upper bound {high:.4f})")


@dataclass
class ModelReport:
    models: int
    promoted: list[int]


def check_models(store: ObjectStore, dataset: str, model: str) -> ModelReport:
    from shardline.trainer.promote import history
    from shardline.trainer.registry import ModelRegistry

    reg = ModelRegistry(store, dataset, model)
    pointer = reg.promoted()
    chain = history(pointer)
    _require(chain == sorted(set(chain)), f"promotion history not increasing: {chain}")
    previous: float | None = None
    for n in chain:
        meta = reg.meta(n)                          # complete: meta.json is written last
        _require(meta["model_version"] == n, f"model {n}: meta names {meta['model_version']}")
        _require(meta["gate"]["passed"] is True, f"model {n} was promoted with a failed gate")
        reg.weights(n)                              # loadable
        after = meta["metrics"]["after"]["accuracy"]
        before = (meta["metrics"].get("before") or {}).get("accuracy")
        tol = float(meta["config"]["train"]["promote_tolerance"])
        if previous is not None and before is not None:
            _no_shown_drop(n, meta, after, before, tol)
        previous = after
    for n in reg.numbers():
        if store.head(reg.key(n, "meta.json")) is not None and n not in chain:
            _require(pointer is None or pointer.number != n, f"model {n}: pointer mismatch")
    return ModelReport(len(reg.numbers()), chain)


class VersionWatcher:
    """Polls the latest version on a thread; every version it sees must read completely
    (its document, every batch list, every shard present with its size)."""

    def __init__(self, store: ObjectStore, cfg: DatasetConfig, interval_s: float = 0.2) -> None:
        self.store, self.cfg, self.interval_s = store, cfg, interval_s
        self.problems: list[str] = []
        self.seen: set[int] = set()
        self.reads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="version-watcher", daemon=True)

    def _look(self) -> None:
        versions = list_versions(self.store, self.cfg.prefix)
        if not versions:
            return
        n = versions[-1]
        m = read_manifest(self.store, self.cfg.prefix, n)
        for s in [*m.shards, *m.quarantine.shards]:
            info = self.store.head(s.path)
            if info is None or info.size != s.bytes:
                self.problems.append(f"v{n}: {s.path} {'missing' if info is None else 'size'}")
        self.seen.add(n)
        self.reads += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._look()
            except Exception as exc:  # noqa: BLE001 - any failure to read is a finding
                self.problems.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval_s)

    def __enter__(self) -> VersionWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
