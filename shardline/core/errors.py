"""Error types. Each message names the object, the rule, the value found and what to do.

Retrying: only :class:`TransientStoreError` (and the standard ``ConnectionError`` /
``TimeoutError``) can go away by itself; every other error here needs a person or a code
change, so retrying it only delays the report. :func:`is_transient` is the one place that
decides, for Prefect's ``retry_condition_fn`` and any other retry loop. A plain
:class:`StoreError` counts as permanent (e.g. "no dataset versions", an unknown manifest
format, invalid JSON), so code that does not know better never retries.
"""

from __future__ import annotations


class ShardlineError(Exception):
    """Base class for errors a user is expected to read and act on."""


class ConfigError(ShardlineError):
    """The dataset configuration (TOML or environment) is invalid."""


class SchemaChange(ConfigError):
    """The configuration changes a dataset's recorded schema in a way that is not additive
    (a dtype, a shape, a removed or reordered class; ``core.evolution``). Refused before any
    Spark work and never retried: the fix is a new dataset name."""


class StoreError(ShardlineError):
    """An object-store call failed; the message names bucket, key and the operation.

    Not retried unless it is a :class:`TransientStoreError`."""


class TransientStoreError(StoreError):
    """A failure a retry may fix: the endpoint did not answer, timed out, throttled (503
    SlowDown) or failed on its side (5xx)."""


class PermanentStoreError(StoreError):
    """A failure a retry cannot fix: the bucket or key does not exist, the credentials are
    wrong or lack permission, a document is not what this shardline reads."""


class ObjectExists(PermanentStoreError):
    """A conditional write (If-None-Match: *) found the key already present.

    The caller decides (e.g. take the next version number); never retried as is."""


class ObjectChanged(PermanentStoreError):
    """A compare-and-swap write (If-Match) found a different ETag; re-read, then retry."""


class ObjectDeleted(ObjectChanged):
    """A read pinned to a listed ETag (If-Match) found no object at all: it was deleted
    since it was listed."""


class SourceReplaced(ObjectChanged):
    """An incoming object was replaced (another ETag) after detect listed it: its listed
    version is gone, so nothing of it is published; the run detects again and converts the
    new object as a new upload. Never the source's fault: no strike."""


class WorkerStoreError(StoreError):
    """A store error raised inside a Spark task (transient, or a source that changed while
    it was read): the run's environment failed, not its batch. Spark hands the driver only
    the task's traceback as text; :func:`worker_store_error` types it again, at that one
    boundary. A transient fault comes back as :class:`TransientWorkerError` (retried);
    a source changed while it was read is not transient. ``replaced``: the task found a
    source replaced during ingest."""

    replaced: bool = False


def worker_store_error(exc: BaseException) -> WorkerStoreError | None:
    """The store error a Spark task raised, as a :class:`WorkerStoreError` (None: the task
    failed for another reason). Reads the text of Spark's exception: nothing else crosses."""
    for line in reversed(str(exc).splitlines()):    # the exception's line ends a traceback
        if "SourceReplaced" in line:
            err = WorkerStoreError(f"a Spark task found a source {line.strip()[:500]}")
            err.replaced = True
            return err
        if "TransientStoreError" in line:
            return TransientWorkerError(
                f"a Spark task failed on the store (transient): {line.strip()[:500]}")
        if "ObjectChanged" in line:
            return WorkerStoreError(f"a Spark task failed on the store: {line.strip()[:500]}")
    return None


class TransientWorkerError(WorkerStoreError, TransientStoreError):
    """A Spark task's transient store fault (a body cut short, reset, stalled or failing
    its checksum after the store's own retries, a 5xx): the driver runs the batch again
    (``tasks.driver.until_published``) and Prefect retries the stage; never a strike."""


def source_replaced(exc: BaseException) -> bool:
    """Did the run fail because an incoming object was replaced while it was read (in the
    driver, or inside a Spark task)?"""
    return isinstance(exc, SourceReplaced) or bool(getattr(exc, "replaced", False))


class ServiceUnavailable(ShardlineError):
    """A service the command needs (S3, Prefect API, Spark Connect) does not answer.

    Raised by pre-flight checks, before any flow run exists."""

    def __init__(self, service: str, url: str, problem: str, fix: str) -> None:
        self.service, self.url, self.problem, self.fix = service, url, problem, fix
        super().__init__(f"{service} at {url} {problem}; {fix}")


class ValidationFailed(ShardlineError):
    """The great-expectations suite failed for a batch; nothing was published.

    ``headline``: the line a person reads first (the most common mistake: rule, values,
    object, fix; the CLI's one error line); ``details``: the lines after it (counts, other
    rules, the report). ``str()`` is all of them, one per line."""

    def __init__(self, headline: str, *details: str) -> None:
        super().__init__(headline, *details)   # args: pickles across a flow run as is
        self.headline, self.details = headline, list(details)

    def __str__(self) -> str:
        return "\n".join([self.headline, *(f"  {d}" for d in self.details)])


class PublishConflict(ShardlineError):
    """A concurrent publish made this batch unpublishable as converted; re-run ingest."""


class PublishIncomplete(ShardlineError):
    """An object the version about to be committed names is missing or has the wrong size
    (a sweep or an operator removed it); nothing was committed. The driver converts the
    batch again, as after a lost race."""


_TRANSIENT: tuple[type[BaseException], ...] = (TransientStoreError, ConnectionError,
                                                TimeoutError)


def is_transient(exc: BaseException | None) -> bool:
    """Whether retrying the call that raised ``exc`` may succeed.

    Follows explicit causes (``raise X from Y``), so a transient error wrapped by a layer
    that adds the key or the shard still counts; a :class:`ShardlineError` that is not a
    :class:`TransientStoreError` stops the walk (that layer decided it is permanent) unless
    it is a plain :class:`StoreError` wrapping a transient cause.
    """
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, _TRANSIENT):
            return True
        if isinstance(exc, ShardlineError) and type(exc) is not StoreError:
            return False
        exc, seen = exc.__cause__, seen + 1
    return False


__all__ = [
    "ConfigError", "ObjectChanged", "ObjectDeleted", "ObjectExists", "PermanentStoreError",
    "PublishConflict", "SchemaChange", "ServiceUnavailable", "ShardlineError",
    "SourceReplaced", "StoreError", "TransientStoreError", "TransientWorkerError",
    "ValidationFailed", "WorkerStoreError", "is_transient", "source_replaced",
    "worker_store_error",
]
