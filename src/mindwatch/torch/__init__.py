"""The PyTorch adapter: the only part of mindwatch that imports torch (docs/torch.md).

``HFCallback`` (transformers) and ``LightningCallback`` (lightning) are imported on first
use, so that ``mindwatch.torch`` needs neither."""
from typing import Any

from .callback import TrainMonitor
from .reading.outputs import StepOutputs
from .step.protection import ProtectedStep

__all__ = ["HFCallback", "LightningCallback", "ProtectedStep", "StepOutputs", "TrainMonitor"]


def __getattr__(name: str) -> Any:
    if name == "HFCallback":
        try:
            from .trainers.hf import HFCallback
        except ImportError as exc:
            raise ImportError("mindwatch.torch.HFCallback needs Hugging Face transformers: "
                              "pip install transformers accelerate") from exc
        return HFCallback
    if name == "LightningCallback":
        try:
            from .trainers.lightning import LightningCallback
        except ImportError as exc:
            raise ImportError("mindwatch.torch.LightningCallback needs PyTorch Lightning: "
                              "pip install lightning") from exc
        return LightningCallback
    raise AttributeError(f"module 'mindwatch.torch' has no attribute {name!r}")
