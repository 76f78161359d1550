"""The embedded stack (moto S3 server, Prefect server + worker, Spark Connect) and
production manifests (compose, Kubernetes). Imports the shardline core only."""
