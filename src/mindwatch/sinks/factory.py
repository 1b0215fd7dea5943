"""Opening the sinks the settings ask for. A view whose package is missing raises here, at
construction, naming what to install: a sink the user asked for never disappears silently."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Sink, SinkContext, SinkFactory
from .jsonl import JsonlSink
from .trackers.report_to import EXTRAS, parse_report_to

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
               tensorboard_dir: str | None = None) -> list[Sink]:
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
        if rank == 0:
            for tracker, options in parse_report_to(settings.report_to).items():
                sinks.append(open_tracker(tracker, options, log_dir))
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


def open_tracker(name: str, options: Any, log_dir: str) -> Sink:
    """The sink of tracker ``name``; ImportError naming the extra to install when its
    package is missing, NotImplementedError for one not built yet."""
    if name == "mlflow":
        from .trackers.mlflow_sink import MlflowSink
        return MlflowSink(options, log_dir=log_dir)
    raise NotImplementedError(f"report_to={name!r} is not available yet ({EXTRAS[name]} "
                              "will bring it); use 'mlflow'")
