"""mindwatch: online monitoring, anomaly detection and protection for training runs.

The top-level package is the framework-free core; ``mindwatch.mindspore`` is the adapter.
"""
from .anomaly import ANOMALY_KINDS, Anomaly
from .monitor import Monitor
from .settings import MonitorSettings
from .version import __version__

__all__ = ["ANOMALY_KINDS", "Anomaly", "Monitor", "MonitorSettings", "__version__"]
