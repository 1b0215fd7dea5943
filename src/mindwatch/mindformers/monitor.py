"""``MindWatchMonitor``: mindwatch as a MindFormers callback, for its Trainer and YAML
configs (``callbacks: - type: MindWatchMonitor``)."""
from __future__ import annotations

import os
from typing import Any

from ..mindspore import TrainMonitor
from . import compat
from .reader import MindFormersReader
from .train_cell import MindWatchTrainOneStepCell

# the callback's import registers the cell too, whichever entry a YAML registers first
__all__ = ["MindWatchMonitor", "MindWatchTrainOneStepCell"]

DEFAULT_SUBDIR = "mindwatch"


def default_log_dir() -> str:
    """``<MindFormers' output directory>/mindwatch``: beside its checkpoints and logs."""
    return os.path.join(compat.output_root(), DEFAULT_SUBDIR)


@compat.register_callback
class MindWatchMonitor(TrainMonitor):
    """``TrainMonitor`` reading MindFormers' train cells and their decisions.

    Args:
        log_dir: the run directory; default ``<output_dir>/mindwatch``. With
            ``tensorboard: True`` the events go beside MindFormers' own TensorBoard runs
            when its config has ``tensorboard.tensorboard_dir``.
        **settings: any mindwatch setting (docs/api.md), as YAML keys of the callback entry.

    MindFormers sorts its own callbacks (MFLossMonitor, TrainingStateMonitor, ...,
    CheckpointMonitor) before any other: this one runs after them at every step, so a stop
    it asks for ends training after that step, once CheckpointMonitor has saved it.
    """

    def __init__(self, log_dir: str | None = None, **settings: Any):
        super().__init__(log_dir or default_log_dir(), reader=MindFormersReader(),
                         tensorboard_dir=beside_mindformers_tensorboard,
                         releases=(compat.release(),), **settings)


    def on_train_begin(self, run_context) -> None:
        super().on_train_begin(run_context)
        if self.train_step is None:      # MindFormers' own cell: said once, at the start
            self.monitor.notice(self._reader.unprotected(
                getattr(run_context.original_args(), "train_network", None)))


def beside_mindformers_tensorboard(rank: int) -> str | None:
    """``<tensorboard_dir>/mindwatch_rank_<R>`` when the config has ``tensorboard:
    tensorboard_dir`` (MindFormers writes ``<tensorboard_dir>/rank_<R>``): TensorBoard on
    that folder shows MindFormers' and mindwatch's scalars as runs side by side."""
    own = compat.tensorboard_logdir()
    if own is None:
        return None
    return os.path.join(os.path.dirname(os.path.normpath(own)), f"mindwatch_rank_{rank}")
