"""Reading MindFormers' train cells (``MFTrainOneStepCell`` and its pipeline twin): their
outputs and their own decisions about the update.

``(loss, overflow, scaling_sens, learning_rate, global_norm[, local_norm, size])`` in every
tested release (compat.py): the update is dropped on an overflow, and with
``use_skip_data_by_global_norm`` also when the global norm is not below
``global_norm_spike_threshold`` (the cell compares ``global_norm < threshold`` in float32).
``global_norm`` is None unless ``use_clip_grad``; ``local_norm``
(``runner_wrapper.local_norm: True``) is each gradient's squared L2 norm, in the order of the
optimizer's parameters.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..mindspore.reading.cell_reader import TrainCellReader
from ..mindspore.reading.outputs import StepOutputs, from_stats, read_outputs
from . import compat
from .resume import ResumePoint, yaml_advice


class MindFormersReader(TrainCellReader):
    def __init__(self) -> None:
        # the checkpoints MindWatchMonitor wrote, by path: what state each holds, and where
        # it lies in MindFormers' resumable layout
        self.resume_points: dict[str, ResumePoint] = {}

    def read(self, outputs: Any, cell: Any) -> StepOutputs:
        return read_mindformers(outputs, cell)

    def protected_step(self, cell: Any) -> Any:
        from .protected import ProtectedCell
        return cell if isinstance(cell, ProtectedCell) else None

    def layer_names(self, cell: Any) -> list[str] | None:
        weights = getattr(cell, "weights", None)
        return [parameter.name for parameter in weights] if weights is not None else None

    def resume_hint(self, path: str) -> str:
        """The YAML (MindFormers' ``load_checkpoint`` and ``resume_training``, and
        ``resume: True`` in the MindWatchMonitor entry) that goes on from ``path``."""
        return yaml_advice(path, self.resume_points.get(path))

    def grad_checks_off(self, cell: Any) -> str:
        return ("gradient checks are off: MindFormers' train cell returns no global gradient "
                "norm without runner_wrapper.use_clip_grad: True (max_grad_norm then bounds "
                "it); set it to have mindwatch check the norm")

    def unprotected(self, cell: Any) -> str:
        said = (f"{type(cell).__name__ if cell is not None else 'the train cell'} applies "
                "the updates mindwatch finds anomalous (MindFormers' own cell withholds one "
                "only on overflow, or with use_skip_data_by_global_norm): mindwatch watches "
                "and can stop, but the update is in the weights and in the stop's checkpoint. ")
        if cell is not None and isinstance(cell, compat.pipeline_cell()):
            return said + (
                "MindFormers' Trainer puts its pipeline cell in place of runner_wrapper.type "
                "under pipeline stages and gradient accumulation when it is constructed, before "
                "the YAML's auto_register entries import mindwatch. To withhold the update, "
                "keep `runner_wrapper: {type: MindWatchTrainOneStepCell}` in the YAML and "
                "start the launcher through mindwatch's: `python \"$(python -m "
                "mindwatch.mindformers | tail -n 1)/mindwatch_launch.py\" run_mindformer.py "
                "...` (with msrun, that file before run_mindformer.py), or import "
                "mindwatch.mindformers before the Trainer is built; MindWatchPipelineCell then "
                "takes the Trainer's pipeline cell's place (docs/mindformers.md)")
        return said + ("To withhold it, set `runner_wrapper: {type: MindWatchTrainOneStepCell}` "
                       "in the YAML, keeping the wrapper's other keys (docs/mindformers.md)")


def read_mindformers(outputs: Any, cell: Any) -> StepOutputs:
    """What a MindFormers train cell returned, and whether it dropped the update itself."""
    out = read_outputs(outputs)
    if not compat.outputs_of_train_cell(outputs):
        return out
    if not out.skipped and compat.cell_setting(cell, compat.SKIP_BY_GLOBAL_NORM, False):
        out.skipped = not _below(out.grad_norm, compat.cell_setting(
            cell, compat.SPIKE_THRESHOLD, compat.DEFAULT_SPIKE_THRESHOLD))
    norms = compat.local_norms(outputs)
    if norms is not None:
        out.param_sq_norms = np.asarray(norms.asnumpy(), np.float64).reshape(-1)
    return out


def read_protected(outputs: Any, cell: Any, stats: list[float]) -> StepOutputs:
    """What one of mindwatch's MindFormers cells (``cell``) returned: mindwatch's numbers from its
    ``stats``, and MindFormers' own from its outputs (the loss scale, the per-parameter
    norms, an update MindFormers dropped itself: an overflow, or a skip by global norm)."""
    own = read_mindformers(outputs, cell)
    out = from_stats(stats, cell.verdict, param_sq_norms=own.param_sq_norms)
    out.skipped = out.skipped or own.skipped
    out.extra.update(own.extra)
    return out


def _below(norm: float | None, threshold: float) -> bool:
    """The cell's ``global_norm < threshold``, in float32 as the graph compares."""
    if norm is None:
        return True
    return bool(np.float32(norm) < np.float32(threshold))
