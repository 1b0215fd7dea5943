"""The MindSpore adapter: the only part of mindwatch that imports MindSpore."""
from .callback import TrainMonitor
from .wrap import MonitoredTrainStep

__all__ = ["MonitoredTrainStep", "TrainMonitor"]
