"""Opening the sinks the settings ask for. A view whose package is missing raises here, at
construction, naming what to install: a sink the user asked for never disappears silently."""
from __future__ import annotations

from typing import Any, List

from .base import Sink
from .jsonl import JsonlSink


def open_sinks(settings: Any, *, log_dir: str, log_path: str, rank: int, local_rank: int,
               console: Sink, summary_event_class: Any = None) -> List[Sink]:
    sinks: List[Sink] = [JsonlSink(log_path), console]
    try:
        if settings.tensorboard:
            from .tensorboard import TensorBoardSink
            sinks.append(TensorBoardSink(log_dir, rank))
        if settings.mindinsight:
            from .mindinsight import MindInsightSink
            sinks.append(MindInsightSink(log_dir, rank, event_class=summary_event_class))
        if settings.prometheus_port is not None:
            from .prometheus import PrometheusSink
            # One port per process: rank r of a node serves on port + its local rank.
            port = settings.prometheus_port
            sinks.append(PrometheusSink(port + local_rank if port else 0, rank))
    except BaseException:
        for sink in sinks:
            if sink is not console:
                sink.close()
        raise
    return sinks
