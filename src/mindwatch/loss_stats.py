"""The loss, summarised: an exponential moving average per step and a mean per epoch.

Non-finite losses are counted, never folded into an average they would poison.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional


class LossStats:
    def __init__(self, smoothing: float):
        self.smoothing = smoothing          # weight of the history in the moving average
        self.smooth: Optional[float] = None
        self.epoch: Optional[int] = None
        self._losses: List[float] = []
        self._steps = 0
        self._previous_mean: Optional[float] = None

    def add(self, loss: Optional[float], steps: int) -> None:
        if loss is not None and math.isfinite(loss):
            self.smooth = (loss if self.smooth is None
                           else self.smoothing * self.smooth + (1 - self.smoothing) * loss)
            self._losses.append(loss)
        self._steps += steps

    def end_epoch(self) -> Optional[Dict[str, Any]]:
        """The finished epoch's record fields (None when nothing was added), then reset."""
        if self.epoch is None or self._steps == 0:
            return None
        mean = math.fsum(self._losses) / len(self._losses) if self._losses else None
        change = converging = None
        if mean is not None and self._previous_mean is not None:
            change = mean - self._previous_mean
            converging = change < 0
        fields = dict(epoch=self.epoch, loss_mean=mean, steps=self._steps, loss_change=change,
                      converging=converging, nonfinite_losses=self._steps - len(self._losses))
        if mean is not None:
            self._previous_mean = mean
        self._losses, self._steps = [], 0
        return fields

    def state_dict(self) -> Dict[str, Any]:
        return {"loss_smooth": self.smooth, "previous_epoch_mean": self._previous_mean}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.smooth = state.get("loss_smooth")
        self._previous_mean = state.get("previous_epoch_mean")
