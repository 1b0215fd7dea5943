"""Opening the sinks the settings ask for. A view whose package is missing raises here, at
construction, naming what to install: a sink the user asked for never disappears silently."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .base import Sink, SinkContext, SinkFactory
from .jsonl import JsonlSink
from .report_to import parse_report_to

# Views that only a framework adapter can write, by the setting that switches each on.
FRAMEWORK_VIEWS = {
    "mindinsight": "mindinsight=True writes MindSpore summary files and needs MindSpore: use "
                   "mindwatch.mindspore.TrainMonitor (pip install mindspore), or leave "
                   "mindinsight off",
}


def check_framework_views(settings: Any, framework_sinks: Mapping[str, SinkFactory]) -> None:
    """Raises ValueError for a view that is switched on but no framework can write."""
    for setting, why in FRAMEWORK_VIEWS.items():
        if getattr(settings, setting) and setting not in framework_sinks:
            raise ValueError(why)


def open_sinks(settings: Any, *, log_dir: str, log_path: str, rank: int, local_rank: int,
               console: Sink, framework_sinks: Mapping[str, SinkFactory],
               tensorboard_dir: str | None = None,
               open_tracker: Callable[[str, Mapping[str, Any], str, int], Sink] | None = None
               ) -> list[Sink]:
    """The sinks ``settings`` ask for; ``open_tracker`` opens each ``report_to`` tracker
    (``mindwatch.trackers``, above this layer: a tracker's end reads the run's views)."""
    check_framework_views(settings, framework_sinks)
    sinks: list[Sink] = [JsonlSink(log_path), console]
    try:
        if settings.tensorboard:
            from .tensorboard import TensorBoardSink
            sinks.append(TensorBoardSink(log_dir, rank, directory=tensorboard_dir))
        context = SinkContext(log_dir=log_dir, rank=rank, local_rank=local_rank)
        for setting in FRAMEWORK_VIEWS:
            if getattr(settings, setting):
                sinks.append(framework_sinks[setting](context))
        if settings.prometheus_port is not None:
            from .prometheus import PrometheusSink
            # One port per process: rank r of a node serves on port + its local rank.
            port = settings.prometheus_port
            sinks.append(PrometheusSink(port + local_rank if port else 0, rank,
                                        host=settings.prometheus_host))
        trackers = parse_report_to(settings.report_to)
        if trackers and open_tracker is None:
            raise ValueError("report_to needs a monitor that opens trackers (mindwatch.Monitor)")
        for tracker, options in trackers.items():
            if rank == 0 or options.get("all_ranks"):
                sinks.append(open_tracker(tracker, options, log_dir, rank))  # type: ignore[misc]
        if settings.alert_webhook is not None:
            # Last: an alert leaves only once every other view has the record.
            from .alert import AlertSink
            sinks.append(AlertSink(settings.alert_webhook, settings.alert_format,
                                   log_dir=log_dir))
    except BaseException:
        for sink in sinks:
            if sink is not console:
                sink.close()
        raise
    return sinks
