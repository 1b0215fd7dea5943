"""Reading what a train cell returned: ours, MindSpore Transformers', or a bare loss."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...pipeline.layer_state import LayerGrouping
from ...records import Step
from ..step.verdict import STAT_GRAD_NORM, STAT_LOSS, STAT_LR, StepVerdict


class ProtectedStep(Protocol):
    """A train cell of mindwatch's making, which decides in its graph (``wrap``'s step,
    MindSpore Transformers' ``MindWatchTrainOneStepCell``)."""

    def read(self, outputs: Any) -> StepOutputs:
        """What one call returned (``outputs``), as plain numbers."""


@dataclass
class StepOutputs:
    loss: float | None = None
    grad_norm: float | None = None
    lr_groups: list[float] | None = None
    skipped: bool = False
    grads_finite: bool | None = None
    param_sq_norms: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    aux: Any = None       # the forward's other outputs (Tensors), with has_aux
    local_grad_norms: list[float] | None = None   # every rank's, before the reduction
    data_time_s: float | None = None   # jit_step: from the previous step's return to this one
    batch: dict[str, Any] | None = None   # the batch's identity (reading/batch.py)
    skip_reason: str | None = None     # withheld for its known bad batch (reading/batch.py)
    held: bool = False      # some rank's host withheld the step on purpose (verdict.py)

    def observation(self, layers: LayerGrouping | None) -> dict[str, Any]:
        """``Monitor.observe``'s keyword arguments for these outputs (``layers`` groups the
        per-parameter norms into layers)."""
        lrs = self.lr_groups
        return {"loss": self.loss, "grad_norm": self.grad_norm, "skipped": self.skipped,
                "grads_finite": self.grads_finite, "lr": lrs[0] if lrs else None,
                "lr_groups": lrs if lrs and len(lrs) > 1 else None,
                "layer_grad_norms": None if self.param_sq_norms is None or layers is None
                else layers.norms(self.param_sq_norms), "extra": self.extra or None,
                "local_grad_norms": self.local_grad_norms, "batch": self.batch,
                "skip_reason": self.skip_reason}


def _array(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if hasattr(value, "tolist"):      # a Tensor: tolist() is ~4x quicker than asnumpy()
        return np.asarray(value.tolist(), dtype=np.float64)
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def _scalar(value: Any) -> float | None:
    array = _array(value)
    if array is None or array.size == 0:
        return None
    return float(array.reshape(-1)[0])


def _flag(value: Any) -> bool | None:
    array = _array(value)
    return None if array is None or array.size == 0 else bool(array.reshape(-1).all())


def read_outputs(outputs: Any, *, wrapped_by: ProtectedStep | None = None) -> StepOutputs:
    """``wrapped_by``: the train cell of mindwatch's that produced ``outputs``, if ours."""
    if wrapped_by is not None:
        return wrapped_by.read(outputs)
    if isinstance(outputs, (tuple, list)):
        if len(outputs) in (5, 7):
            # MindSpore Transformers' train cells: (loss, overflow, scaling_sens,
            # learning_rate, global_norm[, local_norm, size]). overflow means the update
            # was dropped; the LR is the one the optimizer was given at this step.
            lr = _array(outputs[3])
            return StepOutputs(
                loss=_scalar(outputs[0]), skipped=bool(_flag(outputs[1])),
                lr_groups=(None if lr is None or lr.size == 0
                           else [float(v) for v in lr.reshape(-1)]),
                grad_norm=_scalar(outputs[4]), extra={Step.LOSS_SCALE: _scalar(outputs[2])})
        if len(outputs) == 3:
            # nn.TrainOneStepWithLossScaleCell: (loss, overflow, loss scale).
            return StepOutputs(loss=_scalar(outputs[0]), skipped=bool(_flag(outputs[1])),
                               extra={Step.LOSS_SCALE: _scalar(outputs[2])})
        return StepOutputs(loss=_scalar(outputs[0]) if outputs else None)
    return StepOutputs(loss=_scalar(outputs))


def from_stats(stats: list[float], verdict: StepVerdict | None, **fields: Any) -> StepOutputs:
    """A protected step's outputs from its ``stats`` vector (verdict.py's layout, as a list:
    ``tolist()`` converts in ~5 us, ``asnumpy()`` takes ~20 us, most of it numpy parsing the
    buffer's format string) and the ``verdict`` that decided on it (None: no skipping, every
    update applied); ``fields``: the step's other ``StepOutputs`` fields."""
    loss, grad_norm = stats[STAT_LOSS], stats[STAT_GRAD_NORM]
    lr_end = verdict.stats_lr_end if verdict is not None else None
    out = StepOutputs(loss=loss, grad_norm=grad_norm, lr_groups=stats[STAT_LR:lr_end],
                      skipped=verdict is not None and not verdict.update_applied(stats),
                      held=verdict is not None and verdict.held_by_a_host(stats),
                      grads_finite=math.isfinite(grad_norm), **fields)
    if verdict is not None and verdict.rank_norms:    # the ranks' norms follow the LRs
        local = _local_norms(stats[lr_end:-2], verdict.rank)
        out.local_grad_norms = local["local_grad_norms"]
        out.extra.update(local["extra"])
    return out


def _local_norms(squares: list[float], rank: int) -> dict[str, Any]:
    """StepOutputs' fields of every rank's squared local norm (float32 sums)."""
    norms = [math.sqrt(v) if v >= 0 else math.nan for v in squares]   # NaN stays NaN
    return {"local_grad_norms": norms, "extra": {Step.LOCAL_GRAD_NORM: norms[rank]}}
