"""Error types. Each message names the object, the rule, the value found and what to do."""

from __future__ import annotations


class ShardlineError(Exception):
    """Base class for errors a user is expected to read and act on."""


class ConfigError(ShardlineError):
    """The dataset configuration (TOML or environment) is invalid."""


class StoreError(ShardlineError):
    """An object-store call failed; the message names bucket, key and the operation."""


class ObjectExists(StoreError):
    """A conditional write (If-None-Match: *) found the key already present."""


class ObjectChanged(StoreError):
    """A compare-and-swap write (If-Match) found a different ETag."""


class ValidationFailed(ShardlineError):
    """The great-expectations suite failed for a batch; nothing was published."""


class PublishConflict(ShardlineError):
    """A concurrent publish made this batch unpublishable as converted; re-run ingest."""
