"""The file ``run_mindformer.py --register_path`` loads for a YAML entry
``auto_register: mindwatch_callback.MindWatchMonitor`` (``python -m mindwatch.mindformers``
prints this folder). MindFormers loads it as a module of its own, outside any package, so it
imports mindwatch absolutely."""
from mindwatch.mindformers import MindWatchMonitor

__all__ = ["MindWatchMonitor"]
