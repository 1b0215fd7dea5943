"""``MindWatchMonitor``: mindwatch as a MindFormers callback, for its Trainer and YAML
configs (``callbacks: - type: MindWatchMonitor``)."""
from __future__ import annotations

import os
from typing import Any

from ..basics.run_dir import RunLogExists
from ..mindspore import TrainMonitor
from ..mindspore.checkpoints.checkpoint import save_atomically
from ..mindspore.ranks.distributed import replicated_state
from ..mindspore.reading.cb_params import steps_per_epoch
from ..mindspore.step.verdict import OWN_PREFIX
from . import compat, resume
from .pipeline_cell import MindWatchPipelineCell
from .reader import MindFormersReader
from .train_cell import MindWatchTrainOneStepCell

# the callback's import registers the cells too, whichever entry a YAML registers first, and
# has the Trainer keep them where it would put its own pipeline cell
__all__ = ["MindWatchMonitor", "MindWatchPipelineCell", "MindWatchTrainOneStepCell"]
compat.keep_wrapper_type()
# and has MindFormers' CheckpointMonitor leave the cells' own Parameters out (compat.py says
# why): imported before the Trainer builds its callbacks, whichever entry imports mindwatch
compat.leave_out_of_checkpoints(OWN_PREFIX)

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
        reader = MindFormersReader()
        try:
            super().__init__(log_dir or default_log_dir(), reader=reader,
                             tensorboard_dir=beside_mindformers_tensorboard,
                             releases=(compat.release(),), **settings)
        except RunLogExists as exc:      # said as the YAML entry sets it
            if exc.path is None:
                raise
            raise RunLogExists.at(exc.path, resume.RESUME_HOW) from None
        self._resume_points = reader.resume_points
        self._steps_before = 0           # a resumed run's steps before this one

    def on_train_begin(self, run_context) -> None:
        if not isinstance(run_context, resume.ResumedContext):
            self._steps_before = resume.steps_before(run_context.original_args())
        super().on_train_begin(self._resumed(run_context))
        if self.train_step is None:      # MindFormers' own cell: said once, at the start
            self.monitor.notice(self._reader.unprotected(
                getattr(run_context.original_args(), "train_network", None)))

    def _planned_steps(self, cb, sink_dropped: bool) -> int | None:
        # resumed mid-epoch, MindFormers skips that epoch's batches already trained
        planned, per_epoch = super()._planned_steps(cb, sink_dropped), steps_per_epoch(cb)
        if planned is None or not self._steps_before or per_epoch is None:
            return planned
        return planned - self._steps_before % per_epoch

    # A resumed run's cur_step_num starts again at 1: mindwatch counts on from the step
    # resumed, as MindFormers' own callbacks do.
    def on_train_step_begin(self, run_context) -> None:
        super().on_train_step_begin(self._resumed(run_context))

    def on_train_step_end(self, run_context) -> None:
        super().on_train_step_end(self._resumed(run_context))

    def _resumed(self, run_context):
        if not self._steps_before or isinstance(run_context, resume.ResumedContext):
            return run_context
        return resume.ResumedContext(run_context, self._steps_before)

    def _replicated(self) -> bool:
        """MindSpore's parallel context and MindFormers' ``parallel_config``: one model on
        every rank (model_parallel, pipeline_stage, expert_parallel 1) makes semi-automatic
        parallelism pure data parallelism too
        (docs/run-directory.md#one-report-and-one-checkpoint-for-the-job)."""
        return replicated_state(self.monitor.world_size, compat.model_sharded())

    def _save_checkpoint(self, step: int, reason: str) -> str | None:
        """The checkpoint, with the keys MindFormers' resume reads, linked into its
        resumable layout too (``<log_dir>/mindformers_resume``) for the report's advice."""
        cell = self._train_cell()
        if cell is None:
            return None
        point = resume.resume_point(step, self.monitor.responder.history, self._cb_params)
        path = save_atomically(cell, self.monitor.log_dir, step, self.monitor.rank, reason,
                               append=point.keys())
        # the job's one checkpoint under data parallelism (rank 0's): every rank resumes
        # from it, each from its own folder
        ranks = range(self.monitor.world_size) if self._replicated() else [self.monitor.rank]
        try:
            self._resume_points[path] = resume.link_resumable(
                path, self.monitor.log_dir, ranks, point)
        except OSError as exc:           # the checkpoint stands; the advice names it alone
            self._resume_points[path] = point
            self.monitor.notice(f"the checkpoint {path} could not be linked into "
                                f"{resume.RESUME_DIR}/ ({type(exc).__name__}: {exc}); "
                                "the report's advice loads its weights alone")
        return path


def beside_mindformers_tensorboard(rank: int) -> str | None:
    """``<tensorboard_dir>/mindwatch_rank_<R>`` when the config has ``tensorboard:
    tensorboard_dir`` (MindFormers writes ``<tensorboard_dir>/rank_<R>``): TensorBoard on
    that folder shows MindFormers' and mindwatch's scalars as runs side by side."""
    own = compat.tensorboard_logdir()
    if own is None:
        return None
    return os.path.join(os.path.dirname(os.path.normpath(own)), f"mindwatch_rank_{rank}")
