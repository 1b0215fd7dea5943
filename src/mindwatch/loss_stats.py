"""The loss, summarised: an exponential moving average per step and a mean per epoch.

Non-finite losses are counted, never folded into an average they would poison.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from .records import Epoch, Step

# state_dict key of the previous epoch's mean loss
_PREVIOUS_MEAN = "previous_epoch_mean"


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
        fields = {Epoch.EPOCH: self.epoch, Epoch.LOSS_MEAN: mean, Epoch.STEPS: self._steps,
                  Epoch.LOSS_CHANGE: change, Epoch.CONVERGING: converging,
                  Epoch.NONFINITE_LOSSES: self._steps - len(self._losses)}
        if mean is not None:
            self._previous_mean = mean
        self._losses, self._steps = [], 0
        return fields

    def state_dict(self) -> Dict[str, Any]:
        return {Step.LOSS_SMOOTH: self.smooth, _PREVIOUS_MEAN: self._previous_mean}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.smooth = state.get(Step.LOSS_SMOOTH)
        self._previous_mean = state.get(_PREVIOUS_MEAN)
