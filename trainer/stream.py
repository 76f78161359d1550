"""``ShardStream``: the torchdata node that turns a training plan into batches.

It walks epochs -> windows -> the rank's share of each permuted window (``trainer.order``)
and fills fixed-size batches, crossing window boundaries inside an epoch; the last batch of
an epoch may be short (same size on every rank). One iteration of the node covers *all*
epochs, so a prefetcher above it never drains at an epoch boundary; each batch says which
epoch it belongs to and whether it ends it.

State is three integers (epoch, window, offset into the rank's share of that window) plus
the plan fingerprint, batch size and rank layout it is valid for: the order is recomputed
from the seed, so restoring the state continues with exactly the same samples.

Off the batch path (``prebuild=True``, the default): as soon as a window is built, a helper
thread builds the next one (a window is a pure function of epoch, window index and phase;
the stream takes the helper's result only for exactly the key it needs, so batches and
resume are unchanged) and works out each full batch's copies (``picks.plan_batches``;
with the arena, one row index per sample instead), so a batch inside a window is only its
``take`` calls. ``prebuild=False`` builds every window inline and does the bookkeeping per
batch.

Arena (``arena_bytes``; default: the reader's keep-open budget divided by the ranks, for
batches up to ``ARENA_MAX_BATCH_BYTES`` when there are several epochs, else off; 0: off):
when the training set fits, each window's build (the first on the batch path, the later ones on the
helper) copies its shards into one ``ShardArena`` buffer unless they are there already,
and a batch is then one ``take`` of precomputed arena rows instead of one per shard it
touches (``trainer.arena``); same bytes, same order, same state. The copying is a one-time
cost per run (S: ~157 MB of fresh memory, 0.05-0.74 s here, mostly page faults), paid when
the stream starts, like opening and indexing the shards.

Batches (``shardline.core.fields``): one tensor per field, named after it (an image
``[B, C, H, W]`` in channels-last memory: a view of the HWC rows; a tensor ``[B, *shape]``;
a scalar ``[B]``), the target under its name (a class index int64 ``[B]``, e.g. the legacy
``label``; otherwise its stored dtype and shape), ``key`` int64 [B] = (shard ordinal << 32)
| row, ``epoch``, ``epoch_end``. Every field and target tensor views the one batch buffer
(``trainer.buffers``): nothing is copied after the gather.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from shardline.trainer.arena import ShardArena
from shardline.trainer.order import make_windows, rank_positions, shard_order, window_permutation
from shardline.trainer.picks import Picks, build_picks, gather_into, plan_batches
from shardline.trainer.plan import PlannedShard, TrainPlan
from shardline.trainer.shard_reader import ShardReader

Batch = dict[str, Any]
# The arena by default only for batches up to this size: ~1 us saved per take call is
# ~10 % of a 0.8 MB (S) batch's copy, noise on a 38 MB (L) one, not worth the memory there;
# and only with several epochs (a single pass reads each row once: copying costs more).
ARENA_MAX_BATCH_BYTES = 8 << 20


class ShardStream(BaseNode[Batch]):
    EPOCH_KEY = "epoch"
    WINDOW_KEY = "window"
    OFFSET_KEY = "offset"
    LAYOUT_KEY = "layout"

    def __init__(self, plan: TrainPlan, reader: ShardReader, *, batch_size: int, epochs: int,
                 seed: int, rank: int = 0, world: int = 1, window_rows: int = 8192,
                 window_min_shards: int = 8, pin_memory: bool = False,
                 lookahead_bytes: int | None = None, prebuild: bool = True,
                 arena_bytes: int | None = None) -> None:
        super().__init__()
        if batch_size <= 0 or epochs <= 0:
            raise ValueError(f"{batch_size=} and {epochs=} must be positive")
        self.plan, self.reader = plan, reader
        self.batch_size, self.epochs, self.seed = batch_size, epochs, seed
        self.rank, self.world = rank, world
        self.window_rows, self.window_min_shards = window_rows, window_min_shards
        self.pin_memory, self.lookahead_bytes = pin_memory, lookahead_bytes
        self.prebuild = prebuild
        self._build_lock = threading.Lock()   # the window caches, shared with the helper
        self._ahead: tuple[tuple[int, int, int], Future[Picks]] | None = None
        self._windows_by_epoch: dict[int, list[list[int]]] = {}
        self.cols = reader.layout
        self.nbytes = self.cols.row_bytes
        # a class target's indexes travel with the picks; any other target is a column
        self._label = self.cols.target if self.cols.label_source is not None else None
        self._shards: list[PlannedShard] = plan.train_shards
        self._expected = [plan.expected_rows(s) for s in self._shards]
        # (ordinal, the epoch whose sample it is: ``plan.rows_epoch``) -> training rows
        self._rows: dict[tuple[int, int], np.ndarray] = {}
        self._rows_from = 0       # no sample of an epoch before this one is cached
        self._last_members: tuple[int, ...] = ()
        self._last_picks = build_picks([])
        self._last_items: list[tuple[int, Any]] = []          # (ordinal, open shard)
        self._last_seg_at: list[tuple[int, int]] = []         # per segment: (item, start)
        if arena_bytes is None:    # default: where per-take overhead is worth the memory
            small = batch_size * self.nbytes <= ARENA_MAX_BATCH_BYTES
            # each rank holds its own copy: the ranks of a run (on one host, at worst)
            # share the budget rather than each taking all of it
            arena_bytes = reader.keep_open_bytes // max(world, 1) if small and epochs > 1 \
                else 0
        self.arena = ShardArena.sized(arena_bytes, {s.ordinal: s.entry.rows
                                                    for s in self._shards}, self.cols.widths)
        self.layout = (f"{plan.fingerprint()}/b{batch_size}/e{epochs}/s{seed}/w{world}"
                       f"/win{window_rows}x{window_min_shards}")
        self.pool = reader.pool(batch_size, pin_memory)
        self.samples, self.busy_s = 0, 0.0       # production stats (read by the trainer)
        self.windows_built = self.windows_prebuilt = 0   # windows, and those from the helper
        self.windows_arena = 0                           # builds gathered from the arena

    # -- state ------------------------------------------------------------------------------
    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._epoch, self._w, self._offset = 0, 0, 0
        if initial_state is not None:
            if initial_state[self.LAYOUT_KEY] != self.layout:
                raise ValueError(
                    f"loader state was saved for layout {initial_state[self.LAYOUT_KEY]!r}, this "
                    f"run's layout is {self.layout!r} (plan/batch size/epochs/seed/world "
                    "differ); resume with the same dataset version and [train] settings"
                )
            self._epoch = int(initial_state[self.EPOCH_KEY])
            self._w = int(initial_state[self.WINDOW_KEY])
            self._offset = int(initial_state[self.OFFSET_KEY])
        self._win: Picks | None = None
        self._ahead = None

    def get_state(self) -> dict[str, Any]:
        return {self.EPOCH_KEY: self._epoch, self.WINDOW_KEY: self._w,
                self.OFFSET_KEY: self._offset, self.LAYOUT_KEY: self.layout}

    # -- iteration --------------------------------------------------------------------------
    def next(self) -> Batch:
        t0 = time.perf_counter()
        size = self.batch_size
        while True:
            if self._epoch >= self.epochs:
                raise StopIteration
            buf = self.pool.acquire()
            outs, full = self.pool.views(buf)
            n, epoch, win, at = 0, self._epoch, self._win, self._offset
            if win is not None and at + size < len(win):   # common case: inside one window
                flat = win.flat
                if flat is not None:                       # one take per column (arena)
                    rows = flat[at:at + size]
                    for data, out in zip(win.arena, outs, strict=False):  # type: ignore[arg-type]
                        data.take(rows, 0, out, "clip")
                elif (plan := win.plans.get(at)) is None:
                    gather_into(outs, win, at, at + size, 0)
                else:                                      # copies worked out per window
                    for out, copies in zip(outs, plan, strict=False):
                        for take, rows, a, b in copies:
                            take(rows, 0, out[a:b], "clip")
                self._offset = at + size
                self.samples += size
                self.busy_s += time.perf_counter() - t0
                # labels/keys: views of the window's arrays (each position is used once)
                keys = torch.from_numpy(win.key[at:at + size])
                if self._label is None:
                    return {**full, "key": keys, "epoch": epoch, "epoch_end": False}
                return {**full, self._label: torch.from_numpy(win.label[at:at + size]),
                        "key": keys, "epoch": epoch, "epoch_end": False}
            lab = np.empty(size, np.int64)
            key = np.empty(size, np.int64)
            while n < size:
                win = self._window(n)
                if win is None:
                    break
                take = min(size - n, len(win) - self._offset)
                gather_into(outs, win, self._offset, self._offset + take, n, lab, key)
                n += take
                self._offset += take
            epoch_end = self._window(n) is None
            if epoch_end:
                self._epoch, self._w, self._offset = self._epoch + 1, 0, 0
            if n:
                self.samples += n
                self.busy_s += time.perf_counter() - t0
                batch: Batch = self.pool.batch(buf, n)
                if self._label is not None:
                    batch[self._label] = torch.from_numpy(lab[:n])
                batch["key"] = torch.from_numpy(key[:n])
                batch["epoch"], batch["epoch_end"] = epoch, epoch_end
                return batch
            self.pool.release(buf)

    def release(self, batch: Batch, event: Any = None) -> None:
        """Hand a consumed batch's buffer back for reuse (see ``BufferPool``)."""
        self.pool.release(batch, event)

    def _epoch_windows(self, epoch: int | None = None) -> list[list[int]]:
        """The windows (lists of train-shard indexes) of ``epoch`` (default: the current)."""
        epoch = self._epoch if epoch is None else epoch
        with self._build_lock:
            windows = self._windows_by_epoch.get(epoch)
            if windows is None:
                order = shard_order(len(self._shards), self.seed, epoch)
                windows = make_windows(order.tolist(), self._expected, self.window_rows,
                                       self.window_min_shards)
                for old in [e for e in self._windows_by_epoch if e < epoch - 1]:
                    del self._windows_by_epoch[old]
                self._windows_by_epoch[epoch] = windows
        return windows

    def _window(self, carried: int) -> Picks | None:
        """The current window's picks for this rank, built on first use; None at epoch end.

        ``carried``: samples already in the batch being filled; with the offset it fixes
        where batch boundaries fall in a new window (see ``trainer.picks``)."""
        windows = self._epoch_windows()
        while self._win is None or self._offset >= len(self._win):
            if self._win is not None:
                self._w, self._offset, self._win = self._w + 1, 0, None
            if self._w >= len(windows):
                return None
            phase = (self._offset + self.batch_size - carried) % self.batch_size
            self._win = self._built(self._epoch, self._w, phase)
            if self.prebuild:
                self._build_next(len(windows), len(self._win), phase)
        return self._win

    # -- window builds: the next one on a helper thread, off the batch path -------------------
    def _built(self, epoch: int, w: int, phase: int) -> Picks:
        """Window ``w`` of ``epoch`` with ``phase``: the helper's build when it built exactly
        that one (a pure function of the three, so the result is identical), else built here."""
        ahead, self._ahead = self._ahead, None
        self.windows_built += 1
        if ahead is not None and ahead[0] == (epoch, w, phase):
            try:
                picks = ahead[1].result()
                self.windows_prebuilt += 1
                return picks
            except Exception:  # noqa: BLE001 - build it here, where the error is raised
                pass
        return self._build(epoch, w, phase)

    def _build_next(self, n_windows: int, length: int, phase: int) -> None:
        """Start building the window after the current one (same epoch: its phase follows
        from this window's length; next epoch: phase 0, a new epoch starts a new batch)."""
        epoch, w = self._epoch, self._w + 1
        if w < n_windows:
            key = (epoch, w, (phase - length) % self.batch_size)
        elif epoch + 1 < self.epochs:
            key = (epoch + 1, 0, 0)
        else:
            return
        fut: Future[Picks] = Future()

        def run() -> None:
            try:
                fut.set_result(self._build(*key))
            except BaseException as exc:  # noqa: BLE001 - rebuilt (and raised) on use
                fut.set_exception(exc)

        threading.Thread(target=run, daemon=True, name="shard-window").start()
        self._ahead = (key, fut)

    def _drop_samples_before(self, epoch: int) -> None:
        """Forget the cached row samples of epochs before ``epoch`` (done with), scanning
        the cache once per epoch reached, not on every shard opened."""
        if epoch > self._rows_from:
            for old in [k for k in self._rows if k[1] < epoch]:
                del self._rows[old]
            self._rows_from = epoch

    def _build(self, epoch: int, w: int, phase: int) -> Picks:
        windows = self._epoch_windows(epoch)
        upcoming = [self._shards[i].entry for win in windows[w:] for i in win]
        self.reader.source.prefetch(upcoming, self.lookahead_bytes)
        # the window's samples in a canonical order (and, when replay is drawn per epoch,
        # the epoch: a one-window epoch then reads other rows of the same shards)
        in_window = sorted(windows[w])
        members = tuple(in_window) + ((-1, epoch) if self.plan.resample else ())
        with self._build_lock:
            if self._last_members != members:     # (a one-window epoch reuses them)
                # built aside and stored together: an open() that fails part-way leaves
                # the last window's picks, shards and segment starts consistent
                items, seg_at_new = [], []
                opened: list[tuple[int, Any]] = []
                for i in in_window:
                    s = self._shards[i]
                    shard = self.reader.open(s)
                    key = (s.ordinal, self.plan.rows_epoch(s, epoch))
                    rows = self._rows.get(key)
                    if rows is None:
                        self._drop_samples_before(key[1] - 1)
                        rows = self._rows[key] = self.plan.train_rows(
                            s, self.reader.index(s), key[1])
                    items.append((s.ordinal, shard, rows, self.reader.index(s).labels[rows]))
                    seg_at_new += [(len(opened), int(a))
                                   for a in shard.starts[:len(shard.segments)]]
                    opened.append((s.ordinal, shard))
                picks_new = build_picks(items)
                (self._last_members, self._last_picks, self._last_items,
                 self._last_seg_at) = members, picks_new, opened, seg_at_new
            picks, shards, seg_at = self._last_picks, self._last_items, self._last_seg_at
        pos = rank_positions(window_permutation(len(picks), self.seed, epoch, w),
                             self.rank, self.world)
        win = picks.select(pos, chunk=self.batch_size, phase=phase)
        bases = None
        if self.arena is not None:     # (shards another build is still copying: the maps)
            self.arena.fill(self.arena.claim(shards))
            bases = self.arena.bases([o for o, _ in shards])
        if bases is not None and self.arena is not None:
            seg_base = np.array([bases[i] + a for i, a in seg_at], np.int64)
            win.flat = seg_base[win.seg] + win.row
            win.arena = self.arena.data
            self.windows_arena += 1
        elif self.prebuild:     # (without the helper, as before: bookkeeping per batch)
            plan_batches(win, self.batch_size, phase)
        return win

    def stats(self) -> dict[str, float]:
        """Samples produced and the seconds spent producing them (fetch waits included)."""
        rate = self.samples / self.busy_s if self.busy_s > 0 else 0.0
        return {"samples": float(self.samples), "busy_s": self.busy_s, "samples_per_s": rate}

