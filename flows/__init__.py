"""Prefect flows and the Prefect glue around the stages; the stages themselves live in
``shardline.tasks`` and import no Prefect.

- ``ingest`` / ``train``: the flows (wiring only), the deployments' entry points;
- ``ingest_tasks`` / ``train_tasks``: the Prefect task wrappers (clients from settings,
  retries, logging);
- ``artifacts``: what a person reads in the Prefect UI (pure builders + their publication);
- ``settings``: object-store settings for flow runs (the AwsCredentials block).
"""
