"""The MindSpore Transformers (MindFormers) adapter, on the MindSpore one: the only part of
mindwatch that imports MindFormers.

``from mindwatch.mindformers import MindWatchMonitor`` imports MindFormers and registers the
callback and the train cells with it, so YAML configs can name them (``type: MindWatchMonitor``
in ``callbacks:``, ``type: MindWatchTrainOneStepCell`` or ``MindWatchPipelineCell`` as
``runner_wrapper``). The package
itself imports MindFormers only then: ``python -m mindwatch.mindformers`` (the folder for
``run_mindformer.py --register_path``) stays instant.
"""
from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["MindFormersReader", "MindWatchMonitor", "MindWatchPipelineCell",
           "MindWatchTrainOneStepCell"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec("mindformers") is None:
        from .compat import INSTALL_HINT
        raise ImportError(f"mindwatch.mindformers needs MindSpore Transformers: {INSTALL_HINT}")
    from .monitor import MindWatchMonitor
    from .pipeline_cell import MindWatchPipelineCell
    from .reader import MindFormersReader
    from .train_cell import MindWatchTrainOneStepCell
    return {"MindWatchMonitor": MindWatchMonitor, "MindFormersReader": MindFormersReader,
            "MindWatchPipelineCell": MindWatchPipelineCell,
            "MindWatchTrainOneStepCell": MindWatchTrainOneStepCell}[name]
