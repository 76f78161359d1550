"""Pipeline stages, one module per stage, no Prefect: ``detect``, ``convert`` (a sub-package:
its entry point is ``convert.stage``, the rest are its internals), ``validate``, ``publish``,
``sweep``; plus what they share: the batch types (``batch``) and the ledger of what was
published (``ledger``). The Prefect task wrappers live in ``shardline.flows``. Imports the
shardline core, never flows or the CLI."""
