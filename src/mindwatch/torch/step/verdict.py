"""The decision of a protected optimizer step, taken on the gradients' device.

The loss (the mean over the step's ``monitor.backward`` calls), the pre-clip global norm and
any LR held as a tensor are compared with the host's limits as float32 scalars: a comparison
with a Python number is a kernel argument, not a host-to-device copy, so a limit that moves at
every step (the spike rules' windows) costs nothing to hand over, unlike MindSpore's graph,
whose limits live in a Parameter. LRs held as Python floats are judged on the host before the
step, where they already are. NaN fails every comparison, so a NaN or Inf anywhere in the
gradients (a non-finite norm) or in the loss withholds the update, as does a norm whose
float32 squares overflow. The result is a 0-d bool tensor that nobody reads during the step:
``withholding.py`` selects with it, on the device.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ...recovery.float32_bounds import FLOAT32_MAX, bound


class StepVerdict:
    """The limits in force for the next step, and the decision they give."""

    def __init__(self, *, grad_explode: float):
        self._norm_cap = bound(grad_explode)
        self.loss_limit = FLOAT32_MAX
        self.norm_limit = self._norm_cap
        self.lr_limit = FLOAT32_MAX

    def set_limits(self, *, loss: float = math.inf, grad_norm: float = math.inf,
                   lr: float = math.inf) -> None:
        """Withhold the next update above these (``grad_explode`` caps the norm whatever
        this says); ``inf``: no limit."""
        self.loss_limit = bound(loss)
        self.norm_limit = min(bound(grad_norm), self._norm_cap)
        self.lr_limit = bound(lr)

    def lrs_within(self, lrs: Sequence[float]) -> bool:
        """Every LR held as a number non-negative and at most the LR limit (NaN is not)."""
        return all(0.0 <= bound(lr) <= self.lr_limit for lr in lrs)

    def decide(self, *, loss: torch.Tensor | None, norm: torch.Tensor | None,
               tensor_lrs: Sequence[torch.Tensor], lrs_ok: bool,
               device: torch.device) -> torch.Tensor:
        """``apply``: a 0-d bool tensor on ``device``; no value is read to the host."""
        checks = []
        if loss is not None:
            checks += [loss.ge(-FLOAT32_MAX), loss.le(self.loss_limit)]
        if norm is not None:
            checks.append(norm.le(self.norm_limit))
        for lr in tensor_lrs:
            value = lr.detach().float().reshape(()).to(device, non_blocking=True)
            checks += [value.ge(0.0), value.le(self.lr_limit)]
        if not checks:
            return torch.tensor(lrs_ok, device=device)
        apply = checks[0]
        for check in checks[1:]:
            apply = apply & check
        return apply if lrs_ok else apply & False

    def within_bounds(self, *, loss: float | None, grad_norm: float | None,
                      lrs: Sequence[float]) -> bool:
        """The decision repeated on the host (float32 values against float32 bounds)."""
        loss_ok = loss is None or -FLOAT32_MAX <= loss <= self.loss_limit
        norm_ok = grad_norm is None or grad_norm <= self.norm_limit
        return loss_ok and norm_ok and self.lrs_within(lrs)
