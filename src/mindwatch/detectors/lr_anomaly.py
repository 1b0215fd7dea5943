"""A learning rate that is not a number, negative, or jumps up by a large factor at once.

Schedules move the LR smoothly (warm-up, decay) or step it *down*; an upward jump by more
than ``jump_factor`` between consecutive steps is a bug or a bad resume (a schedule restarted,
an LR scaled twice). A warm-up from exactly zero has no ratio and is not a jump.
"""
from __future__ import annotations

import math
from typing import Any

from ..anomaly import LR_ANOMALY, Anomaly
from ..observation import StepObservation
from .base import Detector


class LrAnomalyDetector(Detector):
    def __init__(self, *, jump_factor: float = 10.0):
        self.jump_factor = jump_factor
        self._previous: float | None = None

    def update(self, obs: StepObservation) -> list[Anomaly]:
        lr = obs.lr
        if lr is None:
            return []
        found = []
        if not math.isfinite(lr):
            found.append(Anomaly(LR_ANOMALY, obs.step, lr, None,
                                 f"learning rate is {lr} at step {obs.step}"))
        elif lr < 0:
            found.append(Anomaly(LR_ANOMALY, obs.step, lr, 0.0,
                                 f"learning rate is negative ({lr:.3g}) at step {obs.step}"))
        elif self._previous and lr > self._previous * self.jump_factor:
            found.append(Anomaly(
                LR_ANOMALY, obs.step, lr, self._previous * self.jump_factor,
                f"learning rate jumped {lr / self._previous:.3g}x in one step "
                f"({self._previous:.3g} -> {lr:.3g}) at step {obs.step}"))
        if math.isfinite(lr):
            self._previous = lr
        return found

    def state_dict(self) -> dict[str, Any]:
        return {"previous": self._previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._previous = state.get("previous")
