"""The MindSpore adapter: the only part of mindwatch that imports MindSpore."""
from .callback import TrainMonitor
from .reading.cell_reader import TrainCellReader
from .reading.outputs import StepOutputs
from .step.functional import JitTrainStep
from .step.wrap import MonitoredTrainStep

__all__ = ["JitTrainStep", "MonitoredTrainStep", "StepOutputs", "TrainCellReader",
           "TrainMonitor"]
