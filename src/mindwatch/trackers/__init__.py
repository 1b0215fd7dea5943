"""Experiment trackers (``report_to``: MLflow, SwanLab, W&B), each a queued sink fed the run
log's records on a thread of its own, and told the run's end as the views read it
(``closing.py``). Above ``report/`` in the layers: the end's verdict and page are its."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sinks.base import Sink


def open_tracker(name: str, options: Mapping[str, Any], log_dir: str, rank: int) -> Sink:
    """The sink of tracker ``name`` (a name ``report_to`` accepts); ImportError naming the
    extra to install when its package is missing. Rank 0's, unless the options say
    ``all_ranks``: then every rank's, each a run of its own named after its rank."""
    if name == "mlflow":
        from .mlflow_sink import MlflowSink
        return MlflowSink(options, log_dir=log_dir, rank=rank)
    if name == "swanlab":
        from .swanlab_sink import SwanLabSink
        return SwanLabSink(options, log_dir=log_dir, rank=rank)
    if name == "wandb":
        from .wandb_sink import WandbSink
        return WandbSink(options, log_dir=log_dir, rank=rank)
    raise ValueError(f"report_to: unknown tracker {name!r}")
