"""The MindSpore adapter: the only part of mindwatch that imports MindSpore."""
from .callback import TrainMonitor
from .cell_reader import TrainCellReader
from .functional import JitTrainStep
from .outputs import StepOutputs
from .wrap import MonitoredTrainStep

__all__ = ["JitTrainStep", "MonitoredTrainStep", "StepOutputs", "TrainCellReader",
           "TrainMonitor"]
