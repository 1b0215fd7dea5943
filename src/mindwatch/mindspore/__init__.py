"""The MindSpore adapter: the only part of mindwatch that imports MindSpore."""
from .callback import TrainMonitor
from .functional import JitTrainStep
from .outputs import StepOutputs
from .wrap import MonitoredTrainStep

__all__ = ["JitTrainStep", "MonitoredTrainStep", "StepOutputs", "TrainMonitor"]
