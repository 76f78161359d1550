"""Pipeline stages, one module per stage: pure functions plus thin Prefect task wrappers
(``tasks/prefect_tasks.py``). Imports the shardline core, never flows or the CLI."""
