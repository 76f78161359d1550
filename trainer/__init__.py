"""shardline's trainer: streams a dataset version's Arrow shards into PyTorch and continues
learning from the last promoted model.

Imports neither Prefect nor PySpark, so it runs alone in a GPU image and under torchrun
(``torchrun --nproc-per-node N -m shardline.trainer --config PATH``). The entry point is
:func:`shardline.trainer.run.train`; modules, in data order:

  plan      new shards since the parent model + replay sample; held-out split (holdout)
  cache     bounded local cache of whole, digest-verified shard files; fetch: read-ahead
  columns   the fields and target a batch serves, as byte views of Arrow columns
  shard_file  one memory-mapped Arrow IPC file -> numpy views; shard_reader: opens
            planned shards; picks: the gather; buffers: reusable batch buffers
  order     seeded epoch order: shard order, windows, permutation, rank shares
  stream    the torchdata node producing batches; loader: pipeline + evaluation pass
  model     CNN / ResNet-style; device, dist: placement and torchrun
  loop      training steps; evaluate: held-out accuracy + gate; registry: models in S3
  context   the frozen run context: version, start point, plan, cache, reader
  run       train(); candidate: save the model; promote: gate + pointer; result
"""
