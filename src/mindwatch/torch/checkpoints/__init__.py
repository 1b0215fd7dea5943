"""The training state: checkpoints at an anomaly, snapshots for rewind."""
