"""mindwatch: online monitoring, anomaly detection and protection for training runs.

The top-level package is the framework-free core; ``mindwatch.mindspore`` is the adapter.
"""
from .anomaly import ANOMALY_KINDS, Anomaly
from .basics.batch_identity import batch_fingerprint
from .framework import FrameworkHooks
from .monitor import Monitor
from .settings import MonitorSettings
from .sinks.base import SinkContext
from .sinks.sink_set import SinkError
from .version import __version__

__all__ = ["ANOMALY_KINDS", "Anomaly", "FrameworkHooks", "Monitor", "MonitorSettings",
           "SinkContext", "SinkError", "__version__", "batch_fingerprint"]
