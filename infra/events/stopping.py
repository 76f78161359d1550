"""Clean shutdown for the watchers on SIGINT/SIGTERM.

A watcher loops until a :class:`threading.Event` is set: by a test, by ``max_events``, or by
a signal. A signal only sets the event, so a batch being posted is finished and acknowledged
(or left for redelivery) as a whole. A wait that may last long (an SQS long poll) runs
inside :meth:`Stopper.interruptible`: a signal arriving there ends the wait at once, which
loses nothing (messages received but not yet handled come back after their visibility
timeout).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

log = logging.getLogger(__name__)


class Interrupted(BaseException):  # noqa: N818 - a control-flow signal, like KeyboardInterrupt
    """Raised inside :meth:`Stopper.interruptible` when a stop signal arrives."""


class Stopper:
    """A stop flag that SIGINT/SIGTERM set (when installed from the main thread)."""

    def __init__(self, event: threading.Event | None = None) -> None:
        self.event = event or threading.Event()
        self._waiting = False

    @property
    def stopped(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        self.event.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        log.info("%s received: stopping", signal.Signals(signum).name)
        self.event.set()
        if self._waiting:
            raise Interrupted

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        """Route SIGINT and SIGTERM to this stopper (no-op outside the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """A block a stop signal may cut short (it raises :class:`Interrupted`)."""
        if self.stopped:
            raise Interrupted
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False
