"""A protected step's numbers, read to the host once, by ``observe``.

The step leaves them on the device in one float32 vector (loss, pre-clip global norm,
whether the update was applied, the weights' norm before the update on the steps that measure
it, each rank's own norm, then each LR held as a tensor): a single read per step, the
one a loop printing its loss makes anyway, and none during ``backward`` or the optimizer
step. ``NaN`` stands for "not measured" where the host knows it was not (no loss handed to
``monitor.backward``, no gradient). The read is kept: whoever needs the verdict first (the
state settling after a withheld step, or ``observe``) makes it, the other reads nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from ...records import Step

STAT_LOSS, STAT_GRAD_NORM, STAT_APPLIED, STAT_WEIGHT_NORM, STAT_RANKS = 0, 1, 2, 3, 4  # LRs


@dataclass
class PendingStep:
    """What a step left for ``observe``: the vector on the device and what the host knew."""

    stats: torch.Tensor
    lrs: list[float | None]             # each group's LR; None where it is a tensor
    loss_known: bool
    norm_known: bool
    protected: bool                     # the update could have been withheld
    ranks: int = 0                      # local norms in the vector, one per rank
    rank: int = 0
    batch: Any = None                   # the step's StepBatch (reading/batch.py), or None
    batch_size: int = 0                 # its numbers at the end of the vector (not read yet)
    known_bad: bool = False             # withheld before the update: a known bad batch
    known_shared: bool = False          # the vector ends with how many ranks' were known
    _read: StepOutputs | None = field(default=None, init=False, repr=False, compare=False)

    def read(self) -> StepOutputs:
        """The step's numbers on the host: one read, the first time only."""
        if self._read is None:
            values = self.stats.tolist()                      # the step's one read
            if self.batch_size:
                self.batch.given(values[-self.batch_size:])
                values = values[:-self.batch_size]
            if self.known_shared:               # another rank's batch may be the known one
                self.known_bad |= values.pop() > 0.5
            self._read = self._outputs(values)
        return self._read

    def _outputs(self, values: list[float]) -> StepOutputs:
        local = values[STAT_RANKS:STAT_RANKS + self.ranks] or None
        tensor_lrs = iter(values[STAT_RANKS + self.ranks:])
        lrs = [next(tensor_lrs) if lr is None else lr for lr in self.lrs]
        norm = values[STAT_GRAD_NORM] if self.norm_known else None
        weights = values[STAT_WEIGHT_NORM]
        return StepOutputs(
            loss=values[STAT_LOSS] if self.loss_known else None, grad_norm=norm,
            lr_groups=lrs, skipped=self.protected and values[STAT_APPLIED] < 0.5,
            grads_finite=None if norm is None else math.isfinite(norm), local_norms=local,
            rank=self.rank, weight_norm=None if math.isnan(weights) else weights,
            known_bad=self.known_bad)


@dataclass
class StepOutputs:
    """One step's numbers as Python values."""

    loss: float | None
    grad_norm: float | None
    lr_groups: list[float]
    skipped: bool
    grads_finite: bool | None
    local_norms: list[float] | None = None     # every rank's, before DDP's reduction
    rank: int = 0
    weight_norm: float | None = None    # the changed weights' L2 norm before the update
    known_bad: bool = False             # withheld as a known bad batch (reading/batch.py)

    def observation(self) -> dict[str, Any]:
        """Arguments of ``Monitor.observe``."""
        lrs = self.lr_groups
        fields: dict[str, Any] = {
            "loss": self.loss, "grad_norm": self.grad_norm, "lr": lrs[0] if lrs else None,
            "lr_groups": lrs if len(lrs) > 1 else None, "skipped": self.skipped,
            "grads_finite": self.grads_finite}
        if self.local_norms is not None:
            fields["local_grad_norms"] = self.local_norms
            fields["extra"] = {Step.LOCAL_GRAD_NORM: self.local_norms[self.rank]}
        return fields
