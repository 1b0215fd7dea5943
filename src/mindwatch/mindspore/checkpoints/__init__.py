"""The training state kept aside: checkpoints of the last good weights at an anomaly,
host-memory snapshots for ``rewind``, and what MindSpore's ``ModelCheckpoint`` saved."""
