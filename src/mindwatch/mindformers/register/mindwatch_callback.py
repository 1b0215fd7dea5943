"""The file ``run_mindformer.py --register_path`` loads for the YAML entries
``auto_register: mindwatch_callback.MindWatchMonitor`` (in ``callbacks:``) and
``auto_register: mindwatch_callback.MindWatchTrainOneStepCell`` (or ``MindWatchPipelineCell``,
in ``runner_wrapper:``);
``python -m mindwatch.mindformers`` prints this folder. MindFormers loads it as a module of its
own, outside any package, so it imports mindwatch absolutely."""
from mindwatch.mindformers import (
    MindWatchMonitor,
    MindWatchPipelineCell,
    MindWatchTrainOneStepCell,
)

__all__ = ["MindWatchMonitor", "MindWatchPipelineCell", "MindWatchTrainOneStepCell"]
