"""A step's loss: the sum of the losses backpropagated since the last optimizer step.

Gradient accumulation backpropagates several losses before one optimizer step, and the
gradients the step applies are those of their sum: that sum is the objective the step
minimises, so it is the step's loss, the one judged and logged beside the step's gradient
norm (the norm of its gradient). Each framework then logs the same number:

- a plain loop that backpropagates ``loss / accum_steps`` for each micro-batch (the usual
  way): the window's mean; one that normalises by the window's token count: the window's
  token mean;
- Hugging Face's Trainer: the sum of what ``training_step`` backpropagates and returns (the
  micro-batch's mean divided by the window's batch count, or, for a model that takes
  ``num_items_in_batch``, its loss already normalised over the window's tokens), which is
  what it logs;
- Lightning: ``training_step``'s losses divided by ``accumulate_grad_batches``, as it
  backpropagates them: their mean over a full window.

The sum stays on the device (float32, 0-d): nothing is read to the host here.
"""
from __future__ import annotations

from typing import Any

import torch


class LossWindow:
    """The losses handed to backward since the window began, summed on their device."""

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None
        self.count = 0                      # losses added since the last take

    def add(self, loss: torch.Tensor, *, scaler: Any = None) -> None:
        """One backpropagated loss (one value). ``scaler``: AMP's ``GradScaler`` whose
        scale ``loss`` was multiplied by; divided out here, on the device (a power of two:
        exact)."""
        # a copy: a loss the caller then changes in place (``loss *= k``) leaves it as given
        loss = loss.detach().to(torch.float32, copy=True).reshape(())
        scale = amp_scale(scaler)
        if scale is not None:
            loss = loss / scale.to(loss.device, non_blocking=True)
        self._sum = loss if self._sum is None else self._sum + loss.to(self._sum.device)
        self.count += 1

    def take(self) -> torch.Tensor | None:
        """The sum (0-d float32, on the first loss's device) and a new window; None when no
        loss was added."""
        total, self._sum, self.count = self._sum, None, 0
        return total

    def take_value(self) -> float | None:
        """``take()`` read to the host as a Python float (one read; None: no loss)."""
        total = self.take()
        return None if total is None else total.item()


def amp_scale(scaler: Any) -> torch.Tensor | None:
    """The scale an enabled ``torch.amp.GradScaler`` multiplies the loss by now, as its
    device tensor (``get_scale()`` would read it to the host); None without one."""
    if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
        return None
    # private but stable since torch 1.6: the tensor ``scale()`` multiplies by
    scale = getattr(scaler, "_get_scale_async", lambda: None)()
    return scale if isinstance(scale, torch.Tensor) else None
