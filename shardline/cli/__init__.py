"""The ``shardline`` command line (on top of flows and infra; nothing imports it)."""
