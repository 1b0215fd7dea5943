"""The MindSpore Transformers (MindFormers) adapter, on the MindSpore one: the only part of
mindwatch that imports MindFormers.

``import mindwatch.mindformers`` imports MindFormers and registers the callback and the train
cells with it, so YAML configs can name them (``type: MindWatchMonitor`` in ``callbacks:``,
``type: MindWatchTrainOneStepCell`` or ``MindWatchPipelineCell`` as ``runner_wrapper``).
Two exceptions: ``python -m mindwatch.mindformers`` (the folder for ``run_mindformer.py
--register_path``) imports nothing, to stay instant with nothing else on its standard
output; and where MindFormers is installed but does not import (MindFormers 2.0 without
``hyper_parallel``), the names below raise its error when used.
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any

__all__ = ["MindFormersReader", "MindWatchMonitor", "MindWatchPipelineCell",
           "MindWatchTrainOneStepCell"]


def _names() -> dict[str, Any]:
    if importlib.util.find_spec("mindformers") is None:
        from .compat import INSTALL_HINT
        raise ImportError(f"mindwatch.mindformers needs MindSpore Transformers: {INSTALL_HINT}")
    # the monitor's import registers the callback and both cells
    from .monitor import MindWatchMonitor
    from .pipeline_cell import MindWatchPipelineCell
    from .reader import MindFormersReader
    from .train_cell import MindWatchTrainOneStepCell
    return {"MindWatchMonitor": MindWatchMonitor, "MindFormersReader": MindFormersReader,
            "MindWatchPipelineCell": MindWatchPipelineCell,
            "MindWatchTrainOneStepCell": MindWatchTrainOneStepCell}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _names()[name]


def _register() -> None:
    # While `python -m mindwatch.mindformers` locates its __main__, which imports this
    # package, sys.argv[0] is "-m" (Python's documented placeholder).
    if sys.argv[:1] == ["-m"] or importlib.util.find_spec("mindformers") is None:
        return
    before = set(sys.modules)
    try:
        _names()
    except ImportError as exc:
        if (exc.name or "").startswith("mindwatch"):
            raise
        # no half-imported MindFormers left behind: a later import (once what it lacked is
        # there) would find its packages without the names their __init__ never reached
        for name in set(sys.modules) - before:
            if name == "mindformers" or name.startswith("mindformers."):
                del sys.modules[name]


_register()
