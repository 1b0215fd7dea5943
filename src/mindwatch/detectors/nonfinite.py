"""Non-finite loss or gradients: an alarm on the very step they appear."""
from __future__ import annotations

import math

from ..anomaly import GRADIENT_NONFINITE, LOSS_NONFINITE, Anomaly
from ..observation import StepObservation
from .base import Detector


class NonFiniteDetector(Detector):
    def update(self, obs: StepObservation) -> list[Anomaly]:
        found = []
        if obs.loss is not None and not math.isfinite(obs.loss):
            found.append(Anomaly(LOSS_NONFINITE, obs.step, obs.loss, None,
                                 f"loss is {obs.loss} at step {obs.step}"))
        norm_bad = obs.grad_norm is not None and not math.isfinite(obs.grad_norm)
        if obs.grads_finite is False or norm_bad:
            found.append(Anomaly(GRADIENT_NONFINITE, obs.step, obs.grad_norm, None,
                                 f"gradients hold NaN or Inf at step {obs.step} "
                                 f"(global norm {obs.grad_norm})"))
        return found
