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

from ..mindspore.cell_reader import TrainCellReader
from ..mindspore.outputs import StepOutputs, read_outputs
from . import compat


class MindFormersReader(TrainCellReader):
    def read(self, outputs: Any, cell: Any) -> StepOutputs:
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

    def layer_names(self, cell: Any) -> list[str] | None:
        weights = getattr(cell, "weights", None)
        return [parameter.name for parameter in weights] if weights is not None else None

    def resume_hint(self, path: str) -> str:
        return ("# in the YAML config, then run_mindformer.py --config ... as before: the\n"
                "# weights of that checkpoint load into the model (the optimizer starts afresh)\n"
                f'load_checkpoint: "{path}"')

    def grad_checks_off(self, cell: Any) -> str:
        return ("gradient checks are off: MindFormers' train cell returns no global gradient "
                "norm without runner_wrapper.use_clip_grad: True (max_grad_norm then bounds "
                "it); set it to have mindwatch check the norm")

    def unprotected(self, cell: Any) -> str:
        if cell is not None and not compat.cell_setting(cell, compat.USE_CLIP_GRAD, True):
            return ("MindFormers' train cell computes no global gradient norm without "
                    "runner_wrapper.use_clip_grad: True; with it mindwatch checks the norm, "
                    "and use_skip_data_by_global_norm: True with monitor_config."
                    "global_norm_spike_threshold has MindFormers withhold a spiking step")
        return ("MindFormers' train cell withholds an update only on overflow and, with "
                "use_skip_data_by_global_norm: True, when the global norm reaches "
                "monitor_config.global_norm_spike_threshold; mindwatch cannot act inside it")


def _below(norm: float | None, threshold: float) -> bool:
    """The cell's ``global_norm < threshold``, in float32 as the graph compares."""
    if norm is None:
        return True
    return bool(np.float32(norm) < np.float32(threshold))
