"""The PyTorch adapter: the only part of mindwatch that imports torch (docs/torch.md)."""
from .callback import TrainMonitor
from .reading.outputs import StepOutputs
from .step.protection import ProtectedStep

__all__ = ["ProtectedStep", "StepOutputs", "TrainMonitor"]
